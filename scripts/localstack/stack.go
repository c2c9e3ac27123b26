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
func CreateStack(ctx context.Context, templatePath string, ep Endpoints, prefix string) (map[string]string, error) {
	refs, err := CreateFromTemplate(ctx, ep, templatePath, PrefixNames(prefix))
	if err != nil {
		return nil, err
	}
	tmpl, err := ReadTemplate(templatePath)
	if err != nil {
		return nil, err
	}
	env, err := tmpl.FunctionEnvironment(refs, nil)
	if err != nil {
		return nil, err
	}
	env["AWS_REGION"] = Region
	env["AWS_ENDPOINT_URL_DYNAMODB"] = ep.DynamoDB
	env["AWS_ENDPOINT_URL_SQS"] = ep.SQS
	env["AWS_ENDPOINT_URL_S3"] = ep.S3
	return env, nil
}
