package elevenlabs

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"avatarsvc/gpu-fleet/audio"
)

// SendUserAudio sends 16 kHz mono PCM from the user, converted to the
// agent's user_input_audio_format. It blocks while the send queue is full
// (bounded by the write timeout of the chunks ahead) and returns an error
// wrapping ErrClosed once the conversation has ended. The documentation
// recommends chunks of about 250 ms (4000 samples).
func (c *Conversation) SendUserAudio(pcm []int16) error {
	if len(pcm) == 0 {
		return nil
	}
	// One lock around conversion and queueing keeps the resampler's state
	// and the queue in the same order when callers race.
	c.userPacing.Lock()
	defer c.userPacing.Unlock()
	samples := pcm
	if c.inResampler != nil {
		samples = c.inResampler.Process(pcm)
		if len(samples) == 0 {
			return nil
		}
	}
	var raw []byte
	if c.inFmt.encoding == encodingULaw {
		raw = ulawEncode(samples)
	} else {
		raw = audio.EncodePCM16(samples)
	}
	data, err := json.Marshal(userAudioMessage{UserAudioChunk: base64.StdEncoding.EncodeToString(raw)})
	if err != nil {
		return err
	}
	return c.enqueue(data)
}

// SendContextualUpdate gives the agent background information without
// interrupting it (a contextual_update message).
func (c *Conversation) SendContextualUpdate(text string) error {
	return c.sendJSON(textMessage{Type: typeContextualUpdate, Text: text})
}

// SendUserMessage sends text as if the user had said it (user_message).
func (c *Conversation) SendUserMessage(text string) error {
	return c.sendJSON(textMessage{Type: typeUserMessage, Text: text})
}

// SendUserActivity tells the agent the user is present, resetting its turn
// timeout (user_activity).
func (c *Conversation) SendUserActivity() error {
	return c.sendJSON(typeOnlyMessage{Type: typeUserActivity})
}

func (c *Conversation) sendJSON(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.userPacing.Lock()
	defer c.userPacing.Unlock()
	return c.enqueue(data)
}

// enqueue hands data to the writer (gpu-fleet/wsconn), waiting while its
// queue is full, until the conversation ends.
func (c *Conversation) enqueue(data []byte) error {
	if err := c.conn.Send(data); err != nil {
		return c.closedErr()
	}
	return nil
}

func (c *Conversation) closedErr() error {
	if err := c.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return ErrClosed
}
