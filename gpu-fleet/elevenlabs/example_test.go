package elevenlabs_test

import (
	"avatarsvc/gpu-fleet/remoteagent"
	"context"
	"errors"
	"log"
	"time"

	"avatarsvc/gpu-fleet/elevenlabs"
)

// A bridge reads events on one goroutine and feeds microphone audio from
// another. It needs network access to the real service, so it is compiled
// but not run.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conv, err := elevenlabs.Dial(ctx, elevenlabs.Config{
		AgentID:          "agent_...",
		APIKey:           "", // set for a private agent
		DynamicVariables: map[string]any{"user_name": "Ada"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer conv.Close()

	go func() {
		mic := make([]int16, 4000) // 250 ms at 16 kHz
		for conv.SendUserAudio(mic) == nil {
		}
	}()

	for ev := range conv.Events() {
		switch ev.Kind {
		case remoteagent.AgentAudio:
			_ = ev.PCM // 16 kHz mono: hand to the renderer's playout buffer
		case remoteagent.Interruption:
			// flush audio queued for playout
		case remoteagent.UserTranscript, remoteagent.AgentResponse:
			log.Printf("%v: %s", ev.Kind, ev.Text)
		}
	}
	var ce *elevenlabs.CloseError
	if err := conv.Err(); errors.As(err, &ce) && ce.Normal() {
		log.Print("the agent ended the call")
	} else if err != nil {
		log.Print(err)
	}
}
