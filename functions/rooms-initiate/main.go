// Command rooms-initiate is the Lambda function for the rooms-initiate route.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.Serve("rooms-initiate") }
