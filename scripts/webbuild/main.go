// Command webbuild bundles the web pages (infra/web) for a deployment:
//
//	go run ./scripts/webbuild -api https://<api id>.execute-api.<region>.amazonaws.com -out build/web
//	aws s3 sync build/web s3://<WebBucket>/
//
// The link page then calls that API; template.yaml's WebDistribution serves
// the bucket.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"avatarsvc/scripts/localstack"
	"avatarsvc/scripts/viewer"
)

func main() {
	api := flag.String("api", "", "the API's base URL (the stack's ApiUrl output)")
	out := flag.String("out", "build/web", "output folder")
	flag.Parse()
	if err := run(*api, *out); err != nil {
		fmt.Fprintln(os.Stderr, "webbuild:", err)
		os.Exit(1)
	}
}

func run(api, out string) error {
	if api == "" {
		return fmt.Errorf("-api is required")
	}
	root, err := localstack.RepoRoot()
	if err != nil {
		return err
	}
	if err := viewer.Build(context.Background(), root, out, api); err != nil {
		return err
	}
	fmt.Printf("pages built into %s/ (viewer/, link/); upload with: aws s3 sync %s s3://<WebBucket>/\n", out, out)
	return nil
}
