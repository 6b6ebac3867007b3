// A private Ellipsis stack for the examples' tests: the dev stack's
// binary (tools/cmd/ellipsis-dev: gateway and presence worker in one
// process, auth none) on free loopback ports, against the Redis and NATS
// named by ELLIPSIS_TEST_REDIS_URL / ELLIPSIS_TEST_NATS_URL (`make test`
// starts private ones; else 127.0.0.1:6379 and :4222), with a Redis key
// prefix and a NATS subject prefix of its own. The binary is
// $ELLIPSIS_EXAMPLES_DEV_BIN (scripts/test.sh builds it), else built here.

import { spawn, execFile } from "node:child_process";
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";

// The repository's test helpers for JavaScript live with the SDK's tests.
import { freePort } from "../../../clients/js/test/e2e/stack.js";

export const repoRoot = resolve(fileURLToPath(new URL(".", import.meta.url)), "..", "..", "..");
export const natsURL = process.env.ELLIPSIS_TEST_NATS_URL || "nats://127.0.0.1:4222";
const artifacts = resolve(fileURLToPath(new URL(".", import.meta.url)), "..", "test-artifacts");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));


let built;
async function devBinary() {
  if (process.env.ELLIPSIS_EXAMPLES_DEV_BIN) return process.env.ELLIPSIS_EXAMPLES_DEV_BIN;
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), "ellipsis-examples-"));
    const go = process.env.GO || (existsSync("/usr/local/go/bin/go") ? "/usr/local/go/bin/go" : "go");
    built = promisify(execFile)(go, ["build", "-o", dir + "/", "./tools/cmd/ellipsis-dev"], { cwd: repoRoot, maxBuffer: 16 << 20 }).then(
      () => join(dir, "ellipsis-dev"),
    );
  }
  return built;
}

/**
 * Starts ellipsis-dev with `env` over the test settings and waits for its
 * /readyz. Returns {prefix, wsURL, stop}.
 * @param {Record<string, string>} [env]
 */
export async function startStack(env = {}) {
  const bin = await devBinary();
  const id = randomBytes(4).toString("hex");
  const [http, admin] = [await freePort(), await freePort()];
  const vars = {
    ELLIPSIS_NATS_URL: natsURL,
    ELLIPSIS_REDIS_URL: process.env.ELLIPSIS_TEST_REDIS_URL || "redis://127.0.0.1:6379",
    ELLIPSIS_KEY_PREFIX: `examples-node-${id}:`,
    ELLIPSIS_SUBJECT_PREFIX: `exnode${id}`,
    ELLIPSIS_HTTP_ADDR: `127.0.0.1:${http}`,
    ELLIPSIS_ADMIN_ADDR: `127.0.0.1:${admin}`,
    ELLIPSIS_AUTH: "none",
    ELLIPSIS_SHUTDOWN_DRAIN: "200ms",
    ELLIPSIS_LAME_DUCK: "0s",
    ELLIPSIS_LOG_FORMAT: "console",
    ...env,
  };
  mkdirSync(artifacts, { recursive: true });
  const logPath = join(artifacts, `stack-${id}.log`);
  const log = createWriteStream(logPath);
  const proc = spawn(bin, [], { env: { ...process.env, ...vars }, stdio: ["ignore", "pipe", "pipe"] });
  proc.stdout.pipe(log);
  proc.stderr.pipe(log);
  const exited = once(proc, "exit");
  const stop = async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill("SIGTERM");
    const timer = setTimeout(() => proc.kill("SIGKILL"), 15000);
    await exited;
    clearTimeout(timer);
  };
  const deadline = Date.now() + 30000;
  let last = "";
  while (Date.now() < deadline && proc.exitCode === null) {
    try {
      const res = await fetch(`http://127.0.0.1:${admin}/readyz`);
      if (res.ok) return { prefix: vars.ELLIPSIS_SUBJECT_PREFIX, wsURL: `ws://127.0.0.1:${http}/v1/ws`, stop };
      last = `${res.status}`;
    } catch (err) {
      last = err.message;
    }
    await sleep(100);
  }
  await stop();
  throw new Error(`ellipsis-dev not ready (${last}); log ${logPath}:\n${readFileSync(logPath, "utf8").split("\n").slice(-15).join("\n")}`);
}

/**
 * A user's WebSocket connection (auth none) with a frame inbox.
 * `until(pred)` resolves with the first frame (received or to come)
 * matching pred, or rejects after timeoutMs.
 */
export async function dial(wsURL, user, name = user) {
  const ws = new WebSocket(`${wsURL}?${new URLSearchParams({ user, name })}`);
  const frames = [];
  const waiters = new Set();
  ws.addEventListener("message", (ev) => {
    const f = JSON.parse(ev.data);
    frames.push(f);
    for (const w of waiters) if (w.pred(f)) w.resolve(f);
  });
  await new Promise((res, rej) => {
    ws.addEventListener("open", res, { once: true });
    ws.addEventListener("error", () => rej(new Error(`${user}: WebSocket to ${wsURL} failed`)), { once: true });
  });
  const until = (pred, timeoutMs = 10000) => {
    const seen = frames.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((res, rej) => {
      const w = { pred };
      const timer = setTimeout(() => {
        waiters.delete(w);
        rej(new Error(`${user}: no matching frame within ${timeoutMs} ms; got ${JSON.stringify(frames)}`));
      }, timeoutMs);
      w.resolve = (f) => {
        clearTimeout(timer);
        waiters.delete(w);
        res(f);
      };
      waiters.add(w);
    });
  };
  const send = (f) => ws.send(JSON.stringify(f));
  const join = (room) => {
    const id = `j-${room}`;
    send({ type: "join", room, id });
    return until((f) => f.id === id);
  };
  return { ws, frames, until, send, join, close: () => ws.close() };
}
