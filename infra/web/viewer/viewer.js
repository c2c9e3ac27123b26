// The viewer joins a LiveKit room and shows the avatar renderer's video and
// audio (participant "avatar-renderer"). URL and token come from the query
// string (?url=...&token=...) or the form. window.viewerStats exposes
// progress so a browser test can check that frames are decoded and keep
// coming.
import { Room, RoomEvent, Track } from 'livekit-client';

const AVATAR_IDENTITY = 'avatar-renderer';

const stats = { connected: false, framesDecoded: 0, width: 0, height: 0, lastFrameAt: 0, error: '' };
window.viewerStats = stats;

const $ = (id) => document.getElementById(id);

function setStatus() {
  const parts = [stats.connected ? 'connected' : 'not connected'];
  if (stats.width) parts.push(`${stats.width}x${stats.height}`);
  parts.push(`${stats.framesDecoded} frames decoded`);
  if (stats.fps) parts.push(`${stats.fps.toFixed(1)} fps`);
  if (stats.error) parts.push(`error: ${stats.error}`);
  $('status').textContent = parts.join(' · ');
}

// countFrames follows every frame the browser presents, so the count and the
// fps are what a person sees.
function countFrames(video) {
  let windowStart = performance.now();
  let windowFrames = 0;
  const onFrame = (now, meta) => {
    stats.framesDecoded = meta.presentedFrames ?? stats.framesDecoded + 1;
    stats.width = meta.width;
    stats.height = meta.height;
    stats.lastFrameAt = Date.now();
    windowFrames++;
    if (now - windowStart >= 1000) {
      stats.fps = (windowFrames * 1000) / (now - windowStart);
      windowStart = now;
      windowFrames = 0;
      setStatus();
    }
    video.requestVideoFrameCallback(onFrame);
  };
  video.requestVideoFrameCallback(onFrame);
}

async function join(url, token) {
  const room = new Room({ adaptiveStream: false, dynacast: false });
  room.on(RoomEvent.TrackSubscribed, (track, _pub, participant) => {
    if (participant.identity !== AVATAR_IDENTITY) return;
    const el = track.attach();
    if (track.kind === Track.Kind.Video) {
      $('placeholder')?.remove();
      $('video').replaceChildren(el);
      countFrames(el);
    } else {
      el.hidden = true;
      document.body.appendChild(el);
    }
    if (!room.canPlaybackAudio) $('audio').hidden = false;
  });
  room.on(RoomEvent.TrackUnsubscribed, (track) => track.detach().forEach((el) => el.remove()));
  room.on(RoomEvent.AudioPlaybackStatusChanged, () => { $('audio').hidden = room.canPlaybackAudio; });
  room.on(RoomEvent.ParticipantDisconnected, (p) => {
    if (p.identity === AVATAR_IDENTITY) $('video').replaceChildren(Object.assign(document.createElement('p'), { id: 'placeholder', textContent: 'The avatar left the room (the session ended).' }));
  });
  room.on(RoomEvent.Disconnected, () => { stats.connected = false; setStatus(); });
  $('audio').onclick = () => room.startAudio();
  await room.connect(url, token);
  stats.connected = true;
  setStatus();
}

function start() {
  const q = new URLSearchParams(location.search);
  const url = q.get('url');
  const token = q.get('token');
  if (url && token) {
    join(url, token).catch((e) => { stats.error = String(e.message || e); setStatus(); });
    return;
  }
  const form = $('join');
  form.hidden = false;
  form.onsubmit = (ev) => {
    ev.preventDefault();
    const data = new FormData(form);
    form.hidden = true;
    join(data.get('url'), data.get('token')).catch((e) => { stats.error = String(e.message || e); setStatus(); });
  };
}

start();
