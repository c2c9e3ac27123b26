package roomtest

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"
)

// rawPacket publishes a prepared data packet as it is.
type rawPacket struct{ p *livekit.DataPacket }

func (r rawPacket) ToProto() *livekit.DataPacket { return r.p }

// floodWindow bounds what the sender keeps queued on its own connection:
// the flood is as fast as the connection drains, and the sender's own
// memory stays flat (it may share a process with the receiver it
// attacks, whose heap a test measures).
const floodWindow = 1 << 20

// StreamWithoutTrailer is a hostile sender: it opens a byte stream on topic
// to dest with attrs and sends payload over and over, in chunks of the
// SDK's size, as fast as its connection drains, and never sends the
// trailer. It stops after maxBytes or maxTime and returns the bytes sent.
// (The SDK's own stream writer waits 10 ms per chunk, far slower than an
// attacker.)
func StreamWithoutTrailer(t T, lk *lksdk.Room, dest, topic string, attrs map[string]string, payload []byte, maxBytes int64, maxTime time.Duration) int64 {
	t.Helper()
	id := make([]byte, 16)
	rand.Read(id)
	streamID := hex.EncodeToString(id)
	send := func(p *livekit.DataPacket) {
		if err := lk.LocalParticipant.PublishDataPacket(rawPacket{p},
			lksdk.WithDataPublishReliable(true), lksdk.WithDataPublishDestination([]string{dest})); err != nil {
			t.Fatalf("flood: %v", err)
		}
	}
	send(&livekit.DataPacket{Value: &livekit.DataPacket_StreamHeader{StreamHeader: &livekit.DataStream_Header{
		StreamId: streamID, Topic: topic, Timestamp: time.Now().UnixMilli(), Attributes: attrs,
		ContentHeader: &livekit.DataStream_Header_ByteHeader{ByteHeader: &livekit.DataStream_ByteHeader{}},
	}}})
	const chunk = 15_000 // the SDK's STREAM_CHUNK_SIZE
	pc := lk.LocalParticipant.GetPublisherPeerConnection()
	deadline := time.Now().Add(maxTime)
	var sent int64
	for index := uint64(0); sent < maxBytes && time.Now().Before(deadline); index++ {
		for pc != nil && pc.SCTP().BufferedAmount() > floodWindow {
			time.Sleep(200 * time.Microsecond)
		}
		off := int(sent % int64(len(payload)))
		content := payload[off:min(off+chunk, len(payload))]
		send(&livekit.DataPacket{Value: &livekit.DataPacket_StreamChunk{StreamChunk: &livekit.DataStream_Chunk{
			StreamId: streamID, ChunkIndex: index, Content: content,
		}}})
		sent += int64(len(content))
	}
	return sent
}
