// Local SQS server for tests and `make run` (JSON and Query protocols).
// Usage: node scripts/sqs-server.mjs --port 9324 [--host 127.0.0.1]
import { createSqsServer } from "local-aws-sqs";

function flag(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const port = Number(flag("port", process.env.SQS_PORT ?? "9324"));
const hostname = flag("host", "127.0.0.1");
if (!Number.isInteger(port) || port <= 0) {
  console.error(`sqs-server: invalid --port ${flag("port")}`);
  process.exit(2);
}

const server = await createSqsServer({
  port,
  hostname,
  // Tests delete and recreate queues freely; AWS's 60 s wait would only slow them.
  emulateQueueCreationLifecycle: false,
});
console.log(JSON.stringify({ msg: "sqs-server listening", url: `http://${hostname}:${port}` }));

for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    // Idle keep-alive connections would otherwise hold close() open.
    server.closeAllConnections();
  });
}
