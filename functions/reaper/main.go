// Command reaper is the scheduled Lambda that ends abandoned sessions.
package main

import "avatarsvc/shared/lambdafn"

func main() { lambdafn.ServeReaper() }
