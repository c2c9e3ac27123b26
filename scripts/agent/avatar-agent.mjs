// avatar-agent.mjs URL TOKEN AVATAR_IDENTITY WAV MODE
//
// A voice agent's audio path built with the real LiveKit Agents framework
// (@livekit/agents 1.9.0 on @livekit/rtc-node): it joins the room, lets
// voice.DataStreamAudioOutput wait for the avatar's video track, streams
// speech from WAV (PCM16 mono) to the avatar as the framework does for
// avatar plugins, and prints one JSON line of what the framework reported.
//
// MODE "segments": two back-to-back segments (2.0 s and 1.0 s); every
//   playbackFinished event, in order, with its arrival time.
// MODE "interrupt": a 3 s segment cleared 500 ms after playback started;
//   what waitForPlayout() returned and how long after clearBuffer().
import { readFileSync } from 'node:fs';
import { AudioFrame, Room, TrackKind } from '@livekit/rtc-node';
import { initializeLogger, voice } from '@livekit/agents';

const [url, token, avatarIdentity, wavPath, mode] = process.argv.slice(2);
if (!url || !token || !avatarIdentity || !wavPath || !mode) {
  console.error('usage: avatar-agent.mjs URL TOKEN AVATAR_IDENTITY WAV segments|interrupt');
  process.exit(2);
}
initializeLogger({ pretty: false, level: process.env.AGENT_LOG_LEVEL || 'warn' });

// readWav returns the PCM16 samples and rate of a mono RIFF/WAVE file.
// (The framework's audioFramesFromFile drops the start of a file.)
function readWav(path) {
  const b = readFileSync(path);
  let off = 12, rate = 0, channels = 0;
  while (off + 8 <= b.length) {
    const id = b.toString('ascii', off, off + 4);
    const size = b.readUInt32LE(off + 4);
    if (id === 'fmt ') {
      channels = b.readUInt16LE(off + 10);
      rate = b.readUInt32LE(off + 12);
    } else if (id === 'data') {
      if (channels !== 1) throw new Error(`want mono, got ${channels} channels`);
      const pcm = new Int16Array(size / 2);
      for (let i = 0; i < pcm.length; i++) pcm[i] = b.readInt16LE(off + 8 + 2 * i);
      return { pcm, rate };
    }
    off += 8 + size + (size % 2);
  }
  throw new Error('no data chunk');
}

const { pcm, rate } = readWav(wavPath);
const frameSamples = rate / 50; // 20 ms

async function speak(out, from, seconds) {
  const end = from + Math.round(seconds * rate);
  for (let i = from; i < end; i += frameSamples) {
    // Each frame owns its buffer (slice, not subarray).
    const data = pcm.slice(i, Math.min(i + frameSamples, end));
    await out.captureFrame(new AudioFrame(data, rate, 1, data.length));
  }
  out.flush();
  // @livekit/agents 1.9.0's flush() closes the stream writer asynchronously
  // and forgets it only when the close completes: a frame captured at once
  // would be written to the closing stream (a Node ERR_INTERNAL_ASSERTION).
  // A real pipeline has the LLM's latency between segments; 50 ms suffices.
  await new Promise((r) => setTimeout(r, 50));
  return end;
}

const room = new Room();
await room.connect(url, token, { autoSubscribe: false, dynacast: false });
const out = new voice.DataStreamAudioOutput({
  room, destinationIdentity: avatarIdentity, sampleRate: rate, waitRemoteTrack: TrackKind.KIND_VIDEO, waitPlaybackStart: true,
});
const t0 = Date.now();
const finished = [];
const started = [];
out.on('playbackFinished', (ev) => finished.push({ position: ev.playbackPosition, interrupted: ev.interrupted, atMs: Date.now() - t0 }));
out.on('playbackStarted', () => started.push(Date.now() - t0));

let result;
if (mode === 'segments') {
  let at = await speak(out, rate / 2, 2.0); // skip the file's leading half second of silence
  const sentMs = Date.now() - t0;
  await speak(out, at, 1.0);
  await out.waitForPlayout();
  result = { sent: [2.0, 1.0], sentMs, finished, started };
} else if (mode === 'interrupt') {
  await speak(out, rate / 2, 3.0);
  while (started.length === 0) await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 500));
  const clearedAt = Date.now();
  out.clearBuffer();
  const ev = await out.waitForPlayout();
  result = { position: ev.playbackPosition, interrupted: ev.interrupted, afterClearMs: Date.now() - clearedAt, clearedAtMs: clearedAt - t0 };
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
console.log(JSON.stringify(result));
await room.disconnect();
process.exit(0);
