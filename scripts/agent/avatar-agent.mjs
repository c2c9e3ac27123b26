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
// MODE "bench": BENCH_SEGMENTS (20) segments of 1 s from sample BENCH_ONSET
//   (a voiced onset), each after the mouth is at rest again; the epoch time
//   in ms at which each segment's first frame was handed to the framework
//   (scripts/lipsync-bench).
import { Room, TrackKind } from '@livekit/rtc-node';
import { initializeLogger, voice } from '@livekit/agents';
import { readWav, speak } from './speech.mjs';

const [url, token, avatarIdentity, wavPath, mode] = process.argv.slice(2);
if (!url || !token || !avatarIdentity || !wavPath || !mode) {
  console.error('usage: avatar-agent.mjs URL TOKEN AVATAR_IDENTITY WAV segments|interrupt|bench');
  process.exit(2);
}
initializeLogger({ pretty: false, level: process.env.AGENT_LOG_LEVEL || 'warn' });

const speech = readWav(wavPath);
const { rate } = speech;

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
  let at = await speak(out, speech, rate / 2, 2.0); // skip the file's leading half second of silence
  const sentMs = Date.now() - t0;
  await speak(out, speech, at, 1.0);
  await out.waitForPlayout();
  result = { sent: [2.0, 1.0], sentMs, finished, started };
} else if (mode === 'interrupt') {
  await speak(out, speech, rate / 2, 3.0);
  while (started.length === 0) await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 500));
  const clearedAt = Date.now();
  out.clearBuffer();
  const ev = await out.waitForPlayout();
  result = { position: ev.playbackPosition, interrupted: ev.interrupted, afterClearMs: Date.now() - clearedAt, clearedAtMs: clearedAt - t0 };
} else if (mode === 'bench') {
  const count = Number(process.env.BENCH_SEGMENTS || 20);
  const onset = Number(process.env.BENCH_ONSET || 0);
  const sends = [];
  for (let i = 0; i < count; i++) {
    sends.push(performance.timeOrigin + performance.now());
    await speak(out, speech, onset, 1.0);
    await out.waitForPlayout();
    await new Promise((r) => setTimeout(r, 700)); // the mouth comes to rest
  }
  result = { sends };
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
console.log(JSON.stringify(result));
await room.disconnect();
process.exit(0);
