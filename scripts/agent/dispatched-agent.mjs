// dispatched-agent.mjs dev
//
// A LiveKit Agents worker built with the real framework (@livekit/agents
// 1.9.0), registered for explicit dispatch under AGENT_NAME, as a
// customer's agent would be. For each job the service dispatches (a link
// session, or a client joining an initiated room) it reads the avatar's
// identity from the job metadata, waits for the avatar's video, speaks 2 s
// of AGENT_WAV to it through voice.DataStreamAudioOutput, and appends one
// JSON line to AGENT_RESULTS with what waitForPlayout() returned.
//
// Environment: LIVEKIT_URL, LIVEKIT_API_KEY, LIVEKIT_API_SECRET, AGENT_NAME,
// AGENT_WAV (PCM16 mono), AGENT_RESULTS (a file).
// The worker runs each job in a child process that can outlive a SIGTERM
// to the worker: start it in its own process group and kill the group.
import { appendFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { TrackKind } from '@livekit/rtc-node';
import { AutoSubscribe, cli, defineAgent, ServerOptions, voice } from '@livekit/agents';
import { readWav, speak } from './speech.mjs';

export default defineAgent({
  entry: async (ctx) => {
    const md = JSON.parse(ctx.job.metadata || '{}');
    const report = (r) => appendFileSync(process.env.AGENT_RESULTS, JSON.stringify({ room: ctx.job.room?.name, metadata: md, ...r }) + '\n');
    try {
      await ctx.connect(undefined, AutoSubscribe.SUBSCRIBE_NONE);
      const speech = readWav(process.env.AGENT_WAV);
      const out = new voice.DataStreamAudioOutput({
        room: ctx.room, destinationIdentity: md.avatar_identity, sampleRate: speech.rate,
        waitRemoteTrack: TrackKind.KIND_VIDEO, waitPlaybackStart: true,
      });
      const t0 = Date.now();
      let startedMs = -1;
      out.on('playbackStarted', () => { startedMs = Date.now() - t0; });
      await speak(out, speech, speech.rate / 2, 2.0); // past the file's leading silence
      const ev = await out.waitForPlayout();
      report({ sent: 2.0, position: ev.playbackPosition, interrupted: ev.interrupted, startedMs, finishedMs: Date.now() - t0 });
    } catch (err) {
      report({ error: String(err?.stack || err) });
    }
    ctx.shutdown('spoke'); // done: the worker is free for the next job at once
  },
});

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  // One job process kept warm, so a job starts without spawning one (on a
  // loaded box a cold spawn can outlast LiveKit's assignment timeout). The
  // worker reports no load: it reports the box's CPU by default, and
  // livekit-server routes no job to a worker at or above its target load,
  // which a CI box running other tests reaches ("no servers available").
  cli.runApp(new ServerOptions({
    agent: fileURLToPath(import.meta.url), agentName: process.env.AGENT_NAME, numIdleProcesses: 1, loadFunc: async () => 0,
  }));
}
