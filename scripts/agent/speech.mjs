// Speech helpers shared by the test agents: a WAV reader and one segment
// spoken through a voice.DataStreamAudioOutput as the framework's pipeline
// does (20 ms frames, then flush).
import { readFileSync } from 'node:fs';
import { AudioFrame } from '@livekit/rtc-node';

// readWav returns the PCM16 samples and rate of a mono RIFF/WAVE file.
// (The framework's audioFramesFromFile drops the start of a file.)
export function readWav(path) {
  const b = readFileSync(path);
  let off = 12;
  let rate = 0;
  let channels = 0;
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

// speak sends seconds of pcm from sample `from` as one segment and returns
// where it stopped.
export async function speak(out, { pcm, rate }, from, seconds) {
  const frameSamples = rate / 50; // 20 ms
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
