#!/usr/bin/env bash
# EC2 user data for a renderer host in the GPU autoscaling group.
#
# The launch template fills the three settings below (e.g. with Fn::Sub).
# The host installs the codec runtime libraries, fetches the renderer worker
# binary from the deployment artifact bucket, reads its configuration from
# SSM Parameter Store and runs it under systemd. The worker drains on SIGTERM
# (finishes or hands back its sessions), so a scale-in lifecycle hook gives it
# DRAIN_SECONDS before the instance terminates.
set -euo pipefail

ARTIFACT_URI="${ARTIFACT_URI:-s3://CHANGE-ME-artifacts/avatarsvc/renderer-worker-linux-amd64.tar.gz}"
SSM_PREFIX="${SSM_PREFIX:-/avatarsvc/renderer}"
DRAIN_SECONDS="${DRAIN_SECONDS:-900}"

log() { echo "renderer-bootstrap: $*" | systemd-cat -t renderer-bootstrap -p info 2>/dev/null || echo "renderer-bootstrap: $*"; }

# 1. Runtime libraries the cgo encoders link against (Amazon Linux 2023 or
# Debian/Ubuntu GPU AMIs), and ffmpeg, which takes the still a video avatar
# is animated from. Amazon Linux 2023's repositories have no ffmpeg: bake it
# into the AMI there, or video avatars end as "avatar_rejected: video
# avatars need ffmpeg on the renderer host".
if command -v dnf >/dev/null 2>&1; then
  log "installing libvpx and opus with dnf"
  dnf install -y -q libvpx opus awscli-2 jq
  command -v ffmpeg >/dev/null 2>&1 || log "ffmpeg missing: video avatars will be refused"
elif command -v apt-get >/dev/null 2>&1; then
  log "installing libvpx, opus and ffmpeg with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libvpx7 libopus0 libespeak-ng1 libpocketsphinx3 pocketsphinx-en-us ffmpeg awscli jq || \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq 'libvpx[0-9]*' libopus0 libespeak-ng1 libpocketsphinx3 pocketsphinx-en-us ffmpeg awscli jq
fi

# 2. The worker binary.
install -d -m 0755 /opt/avatarsvc /etc/avatarsvc
log "fetching ${ARTIFACT_URI}"
aws s3 cp --only-show-errors "$ARTIFACT_URI" /opt/avatarsvc/renderer.tar.gz
tar -xzf /opt/avatarsvc/renderer.tar.gz -C /opt/avatarsvc
chmod 0755 /opt/avatarsvc/renderer-worker

# 3. Configuration: every parameter under SSM_PREFIX becomes an environment
# variable (e.g. /avatarsvc/renderer/SESSIONS_TABLE -> SESSIONS_TABLE).
# SecureString values (the LiveKit secret) are decrypted here and the file is
# readable by root only.
log "reading configuration under ${SSM_PREFIX}"
umask 077
aws ssm get-parameters-by-path --path "$SSM_PREFIX" --recursive --with-decryption --output json |
  jq -r '.Parameters[] | "\(.Name | split("/") | last)=\(.Value)"' > /etc/avatarsvc/renderer.env
# The worker's drain deadline and autoscaling hook (renderer-fleet.yaml sets
# ASG_NAME and ASG_LIFECYCLE_HOOK in the launch template's user data).
echo "DRAIN_TIMEOUT=$((DRAIN_SECONDS - 60))s" >> /etc/avatarsvc/renderer.env
[ -n "${ASG_NAME:-}" ] && echo "ASG_NAME=${ASG_NAME}" >> /etc/avatarsvc/renderer.env
[ -n "${ASG_LIFECYCLE_HOOK:-}" ] && echo "ASG_LIFECYCLE_HOOK=${ASG_LIFECYCLE_HOOK}" >> /etc/avatarsvc/renderer.env
echo "AWS_REGION=$(TOKEN=$(curl -sX PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60') && curl -s -H "X-aws-ec2-metadata-token: $TOKEN" http://169.254.169.254/latest/meta-data/placement/region)" >> /etc/avatarsvc/renderer.env

# 4. Egress guard for WebRTC. The worker refuses room URLs that resolve to
# private, loopback, link-local or metadata addresses (netguard), and drops
# such ICE servers and candidates from the room server's signal messages
# (gpu-fleet/room/guard.go). This is the backstop below it: the host drops
# the worker's UDP media traffic to those ranges, so a hostile "LiveKit
# server" cannot aim the renderer's connectivity checks at internal
# services even through what the worker cannot see (a TURN name that
# resolves differently for pion than for the check). The worker runs as its own
# system user (below). Only UDP is dropped: the worker's own TCP calls reach
# AWS through VPC interface endpoints on private addresses, and IMDS
# (169.254.169.254, TCP) serves its credentials and lifecycle state.
useradd --system --no-create-home --shell /usr/sbin/nologin avatarsvc 2>/dev/null || true
if command -v iptables >/dev/null 2>&1; then
  for net in 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 100.64.0.0/10 169.254.0.0/16 127.0.0.0/8; do
    iptables -A OUTPUT -m owner --uid-owner avatarsvc -p udp -d "$net" -j REJECT
  done
fi

# 5. The service. TimeoutStopSec matches the drain window; SIGTERM starts the
# drain, SIGKILL follows only if it overruns.
cat > /etc/systemd/system/avatarsvc-renderer.service <<UNIT
[Unit]
Description=avatarsvc renderer worker
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile=/etc/avatarsvc/renderer.env
ExecStart=/opt/avatarsvc/renderer-worker
Restart=on-failure
RestartSec=2
KillSignal=SIGTERM
TimeoutStopSec=${DRAIN_SECONDS}
LimitNOFILE=65536
User=avatarsvc
# ws_uri is served on 443 (wss://, TLS_CERT_FILE/TLS_KEY_FILE from SSM).
AmbientCapabilities=CAP_NET_BIND_SERVICE

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now avatarsvc-renderer.service
log "renderer worker started"
