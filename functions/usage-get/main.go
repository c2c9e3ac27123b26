// Command usage-get is the Lambda function for the usage-get route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("usage-get") }
