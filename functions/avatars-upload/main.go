// Command avatars-upload is the Lambda function for the avatars-upload
// route. It alone links the face detector that moderates uploads.
package main

import (
	"avatarsvc/gpu-fleet/avatar"
	"avatarsvc/shared/lambdafn"
)

func main() { lambdafn.Serve("avatars-upload", lambdafn.WithModerator(avatar.NewModerator)) }
