// The link page: a visitor opens a link's url (this page, with the link id
// in the fragment). It starts a session through the link (no API key: the
// id is the credential), joins the room with the microphone, shows the
// avatar large with its audio, and ends the conversation by leaving the room
// (the service then ends and bills the session). Captions of both sides
// come from the room's lk.transcription text streams. When the session ends
// before the avatar joined, the service writes the reason's code on the
// room's metadata ({"session_ended": code}) and the page says why at once.
// window.linkStats exposes progress for browser tests.
import { Room, RoomEvent, Track } from 'livekit-client';

const $ = (id) => document.getElementById(id);
const stats = {
  state: 'starting', sessionId: '', framesDecoded: 0, error: '', message: '', mic: '',
  captions: [], // {who: 'avatar'|'you', text, final}, by segment, oldest first
  avatarLoudMs: 0, // how long the avatar's audio has carried speech energy
  endReason: '', // the room's session_ended code, when the session ended before the avatar came
  connectedAt: 0, endedAt: 0, // Date.now() when the page joined the room, and when it showed the end
  expiring: null, // the renderer's session.expiring warning ({expires_at, seconds_left}), once it came
};
window.linkStats = stats;

const apiBase = document.querySelector('meta[name="api-base"]').content.replace(/\/$/, '');

function show(text, isError = false) {
  stats.message = text;
  const p = Object.assign(document.createElement('p'), { id: 'message', textContent: text, role: 'status' });
  if (isError) p.className = 'error';
  $('video').replaceChildren(p);
}

// friendly turns the API's refusals into what a visitor can act on.
function friendly(status, message) {
  const known = {
    'Link not found': 'This link does not exist. Check that you copied all of it.',
    'This link is paused': 'This link is paused for now. Please try again later.',
    'This link has expired': 'This link has expired. Ask whoever shared it for a new one.',
    'This link has reached its use limit': 'This link has already been used as many times as allowed.',
    'Concurrent session limit reached': 'The avatar is busy with other conversations. Please try again in a few minutes.',
    'No minutes remaining': 'The avatar is not available right now: its owner has no conversation minutes left.',
    'This link has reached its concurrent session limit': 'The avatar is busy with other conversations. Please try again in a few minutes.',
    'This link cannot be started from this page': 'This conversation can only be opened from its owner\'s website.',
  };
  if (known[message]) return known[message];
  if (status === 429) return 'Too many attempts. Please wait a minute and try again.';
  return `The conversation could not start (${message || status}). Please try again.`;
}

// endedMessage says why the avatar will not come, by the end reason's code
// (never its detail: that is for the link's owner).
function endedMessage(code) {
  const known = {
    avatar_unavailable: 'The avatar is unavailable right now. Please try again later.',
    avatar_rejected: 'The avatar\'s picture cannot be used. Please tell whoever shared this link.',
    no_capacity: 'The avatar is busy with other conversations. Please try again in a few minutes.',
    agent_unavailable: 'The avatar\'s voice is unavailable right now. Please try again later.',
    ended_by_caller: 'The conversation was ended by the owner of this link.',
    expired: 'The conversation reached its time limit.',
  };
  return known[code] ?? 'The avatar could not join the conversation. Please try again in a moment.';
}

// sessionEnded reads the service's end mark from the room's metadata.
function sessionEnded(metadata) {
  if (!metadata) return '';
  try {
    const code = JSON.parse(metadata).session_ended;
    return typeof code === 'string' ? code : '';
  } catch {
    return '';
  }
}

async function startSession(linkId) {
  const res = await fetch(`${apiBase}/v1/links/start-session`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ link_id: linkId, aspect_ratio: '4:3' }),
  });
  const text = await res.text();
  let body = {};
  try { body = JSON.parse(text); } catch { body = { error: { message: text.trim() } }; }
  if (!res.ok || !body.success) {
    const msg = typeof body.error === 'string' ? body.error : body.error?.message;
    const err = new Error(friendly(res.status, msg));
    err.apiMessage = msg || String(res.status);
    throw err;
  }
  return body;
}

// Captions: LiveKit transcription text streams (topic lk.transcription).
// Interim updates of a segment replace each other until its final one.
const captionEls = new Map();
function caption(who, segment, text, final) {
  let el = captionEls.get(segment);
  if (!el) {
    el = Object.assign(document.createElement('p'), { className: who });
    captionEls.set(segment, el);
    $('captions').appendChild(el);
    while ($('captions').children.length > 6) $('captions').firstElementChild.remove();
    stats.captions.push({ segment, who, text, final });
  }
  el.textContent = `${who === 'you' ? 'You' : 'Avatar'}: ${text}`;
  el.classList.toggle('interim', !final);
  const entry = stats.captions.find((c) => c.segment === segment);
  Object.assign(entry, { text, final });
  $('captions').hidden = false;
}

// meter measures the avatar's audio as it arrives (for the page's speaking
// indicator and for browser tests), whether or not playback is allowed yet.
function meter(track) {
  const ctx = new AudioContext();
  const analyser = ctx.createAnalyser();
  analyser.fftSize = 1024;
  ctx.createMediaStreamSource(new MediaStream([track.mediaStreamTrack])).connect(analyser);
  const buf = new Float32Array(analyser.fftSize);
  setInterval(() => {
    analyser.getFloatTimeDomainData(buf);
    let sum = 0;
    for (const v of buf) sum += v * v;
    const loud = Math.sqrt(sum / buf.length) > 0.02;
    if (loud) stats.avatarLoudMs += 50;
    $('stage').classList.toggle('speaking', loud);
  }, 50);
}

function countFrames(video) {
  const onFrame = (_now, meta) => {
    stats.framesDecoded = meta.presentedFrames ?? stats.framesDecoded + 1;
    video.requestVideoFrameCallback(onFrame);
  };
  video.requestVideoFrameCallback(onFrame);
}

async function main() {
  const linkId = decodeURIComponent(location.hash.slice(1));
  if (!linkId.startsWith('lnk_')) {
    stats.state = 'error';
    show('This link is incomplete. Check that you copied all of it.', true);
    return;
  }
  let started;
  try {
    started = await startSession(linkId);
  } catch (e) {
    stats.state = 'refused';
    stats.error = e.apiMessage || String(e.message || e);
    show(e.message, true);
    return;
  }
  stats.sessionId = started.session_id;
  show('Connecting to the avatar…');

  const room = new Room({ adaptiveStream: false, dynacast: false });
  room.on(RoomEvent.TrackSubscribed, (track, _pub, participant) => {
    if (participant.identity !== started.agent_identity) return;
    const el = track.attach();
    if (track.kind === Track.Kind.Video) {
      $('video').replaceChildren(el);
      countFrames(el);
      stats.state = 'live';
    } else {
      el.hidden = true;
      document.body.appendChild(el);
      meter(track);
    }
    $('audio').hidden = room.canPlaybackAudio;
  });
  room.on(RoomEvent.AudioPlaybackStatusChanged, () => { $('audio').hidden = room.canPlaybackAudio; });
  room.on(RoomEvent.ParticipantDisconnected, (p) => {
    if (p.identity === started.agent_identity) finish('The conversation has ended.');
  });
  room.on(RoomEvent.Disconnected, () => { if (stats.state !== 'ended') finish('The conversation has ended.'); });
  $('audio').onclick = () => room.startAudio();

  const finish = (text, isError = false) => {
    stats.state = 'ended';
    stats.endedAt = Date.now();
    $('controls').hidden = true;
    show(text, isError);
  };
  // The session ended before the avatar came: say why, and leave the room.
  const checkEnded = () => {
    const code = sessionEnded(room.metadata);
    if (!code || stats.state === 'ended') return;
    stats.endReason = code;
    finish(endedMessage(code), true);
    room.disconnect();
  };
  room.on(RoomEvent.RoomMetadataChanged, checkEnded);
  $('end').onclick = async () => {
    stats.state = 'ended';
    await room.disconnect();
    finish('Thanks for talking. The conversation has ended.');
  };

  // The renderer warns (topic avatar.session) a minute before the session's
  // time runs out: show a countdown.
  room.on(RoomEvent.DataReceived, (payload, participant, kind, topic) => {
    if (topic !== 'avatar.session' || participant?.identity !== started.agent_identity) return;
    let m;
    try { m = JSON.parse(new TextDecoder().decode(payload)); } catch { return; }
    if (m.type !== 'session.expiring') return;
    stats.expiring = m;
    const end = Date.parse(m.expires_at);
    const tick = () => {
      if (stats.state === 'ended') { $('notice').hidden = true; return; }
      const left = Math.max(0, Math.round((end - Date.now()) / 1000));
      $('notice').textContent = `This conversation ends in ${left} second${left === 1 ? '' : 's'}.`;
      $('notice').hidden = false;
      if (left > 0) setTimeout(tick, 1000);
    };
    tick();
  });

  room.registerTextStreamHandler('lk.transcription', async (reader) => {
    const text = await reader.readAll();
    const a = reader.info.attributes ?? {};
    const mine = [...room.localParticipant.trackPublications.values()].some((p) => p.trackSid === a['lk.transcribed_track_id']);
    caption(mine ? 'you' : 'avatar', a['lk.segment_id'] || reader.info.id, text, a['lk.transcription_final'] === 'true');
  });

  await room.connect(started.rtc_url, started.participant_token);
  stats.connectedAt = Date.now();
  checkEnded(); // it may have ended before the page joined
  if (stats.state === 'ended') return;
  try {
    await room.localParticipant.setMicrophoneEnabled(true);
    stats.mic = 'on';
  } catch (e) {
    stats.mic = 'blocked';
    $('mic').textContent = 'Microphone blocked: the avatar cannot hear you';
  }
  if (stats.state === 'ended') return;
  $('controls').hidden = false;
  if (stats.state !== 'live') show('Waiting for the avatar to join…');
}

main().catch((e) => { stats.state = 'error'; stats.error = String(e.message || e); show(`Something went wrong: ${stats.error}`, true); });
