// Package elevenlabs bridges a live conversation to an ElevenLabs
// Conversational AI ("Agents platform") agent over its WebSocket API.
//
// This client was written from ElevenLabs' published protocol description
// (the WebSocket API reference and client-events pages of the ElevenLabs
// docs, the AsyncAPI contract in github.com/elevenlabs/packages, and the
// official Python and JavaScript clients, read for behaviour only). It has
// never spoken to the real service from the environment it was built in:
// every test runs against a local httptest server that replays message
// shapes copied from that documentation. Treat the first run against the
// real service as the first real test.
//
// # Protocol summary
//
// Dial opens wss://api.elevenlabs.io/v1/convai/conversation?agent_id=ID (a
// public agent) or, when Config.APIKey is set, first asks
// GET /v1/convai/conversation/get-signed-url?agent_id=ID with the xi-api-key
// header for a signed URL and opens that (a private agent; the API key never
// travels on the WebSocket). It sends conversation_initiation_client_data
// and waits for conversation_initiation_metadata, which names the audio
// formats of both directions (pcm_8000 ... pcm_48000 or ulaw_8000).
//
// After that, user audio goes up as {"user_audio_chunk": base64} messages
// (PCM16 little-endian mono, or μ-law bytes, at the agent's input rate) and
// the server's events come down as JSON text messages. The client answers the
// server's JSON pings ({"type":"ping","ping_event":{"event_id":N}}) with
// {"type":"pong","event_id":N}, answers client_tool_call with an error result
// (this client runs no client tools), and drops agent audio whose event_id
// is at or below the event_id of the latest interruption, as the official
// Python client does.
//
// # Delivery and back-pressure
//
// Events are delivered on a bounded channel (Config.EventBuffer). The reader
// never blocks on it and never drops audio: when the buffer is full the
// conversation is closed and Err reports ErrEventOverflow. Consumers should
// therefore drain Events promptly into their own playout buffer; the agent
// sends speech faster than real time.
//
// All agent audio reaches the consumer as 16 kHz mono int16 PCM, resampled
// with avatarsvc/gpu-fleet/audio. The streaming resampler holds back about a
// millisecond of lookahead, which comes out with the next chunk; on an
// interruption that held-back tail is discarded along with the stale audio.
package elevenlabs
