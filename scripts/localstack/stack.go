package localstack

import "context"

// CreateStack creates every DynamoDB table, SQS queue and S3 bucket that
// template.yaml declares, naming each prefix-LogicalId, and returns the
// environment the functions get there: Globals.Function.Environment with
// each intrinsic resolved (see Template.FunctionEnvironment), plus the region
// and the local endpoints as AWS_ENDPOINT_URL_* so the SDK's own
// configuration finds them. Existing resources are kept, so a second
// `make run` finds its data again. template.yaml stays the one definition of
// the tables for AWS and for the local stack.
//
// local gives the values of variables that name AWS-only resources (such as
// a CloudFront distribution's address): they are taken as given instead of
// resolved from the template.
func CreateStack(ctx context.Context, templatePath string, ep Endpoints, prefix string, local map[string]string) (map[string]string, error) {
	refs, err := CreateFromTemplate(ctx, ep, templatePath, PrefixNames(prefix))
	if err != nil {
		return nil, err
	}
	tmpl, err := ReadTemplate(templatePath)
	if err != nil {
		return nil, err
	}
	env, err := tmpl.FunctionEnvironment(refs, nil, local)
	if err != nil {
		return nil, err
	}
	env["AWS_REGION"] = Region
	env["AWS_ENDPOINT_URL_DYNAMODB"] = ep.DynamoDB
	env["AWS_ENDPOINT_URL_SQS"] = ep.SQS
	env["AWS_ENDPOINT_URL_S3"] = ep.S3
	return env, nil
}

// LocalEnv is the environment the local stack gives the API for what only
// exists in AWS (CloudFront addresses) and for its LiveKit: media is served
// by the local S3 (path style; MEDIA_BASE_URL is completed with the bucket
// once it exists), the link page by the local web server at linkPage.
func LocalEnv(s3Endpoint, linkPage string, lk *LiveKit) map[string]string {
	return map[string]string{
		"MEDIA_BASE_URL": s3Endpoint, "LINK_PAGE_URL": linkPage,
		"FFMPEG_PATH": "ffmpeg", // from PATH (setup.sh installs Debian's)
		"LIVEKIT_URL": lk.URL, "LIVEKIT_API_KEY": lk.APIKey, "LIVEKIT_API_SECRET": lk.APISecret,
		// Webhook endpoints may be http://127.0.0.1 here (receivers on
		// this machine); in AWS only public https ones.
		"WEBHOOK_ALLOW_PREFIXES": "127.0.0.1/32",
	}
}
