// Command avatars-upload is the Lambda function for the avatars-upload
// route. It alone links the face detector that moderates uploads.
package main

import (
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/lambdafn"
)

func newModerator(ffmpeg string) avatars.Moderator { return avatarimage.Moderation{FFmpeg: ffmpeg} }

func main() { lambdafn.Serve("avatars-upload", lambdafn.WithModerator(newModerator)) }
