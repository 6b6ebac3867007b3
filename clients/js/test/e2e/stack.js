// A private Ellipsis stack for the browser tests: the gateway and the
// presence-worker built from this checkout and run as separate processes on
// free loopback ports, against the machine's Redis and NATS with a key and
// subject prefix of their own (so nothing collides with other tests or a
// running dev stack). Logs go to the artifacts folder.

import { spawn, execFile } from "node:child_process";
import { createServer } from "node:net";
import { createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";

const run = promisify(execFile);

/** The Go toolchain: $GO, else go on PATH, else /usr/local/go/bin/go. */
function goBinary() {
  if (process.env.GO) return process.env.GO;
  for (const dir of (process.env.PATH || "").split(":")) if (dir && existsSync(join(dir, "go"))) return join(dir, "go");
  if (existsSync("/usr/local/go/bin/go")) return "/usr/local/go/bin/go";
  throw new Error("e2e: no Go toolchain (set GO, or put go on PATH)");
}

/** A free TCP port on 127.0.0.1. */
export async function freePort() {
  const srv = createServer();
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const { port } = srv.address();
  srv.close();
  await once(srv, "close");
  return port;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Builds both binaries into a temporary folder, or uses
 * $ELLIPSIS_E2E_BIN_DIR when it already holds them (scripts/test.sh builds
 * them once).
 */
export async function buildBinaries(root) {
  const pre = process.env.ELLIPSIS_E2E_BIN_DIR;
  if (pre && ["gateway", "presence-worker", "ellipsis-dev"].every((b) => existsSync(join(pre, b)))) return { dir: pre, temp: false };
  const dir = mkdtempSync(join(tmpdir(), "ellipsis-e2e-bin-"));
  try {
    await run(goBinary(), ["build", "-o", dir + "/", "./services/gateway/cmd/gateway", "./services/presence-worker/cmd/presence-worker", "./tools/cmd/ellipsis-dev"], {
      cwd: root,
      maxBuffer: 16 << 20,
    });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`e2e: go build failed:\n${err.stderr || err.message}`);
  }
  return { dir, temp: true };
}

/** One service process; restartable with the same settings. */
class Service {
  constructor(name, bin, env, logPath) {
    this.name = name;
    this.bin = bin;
    this.env = env;
    this.logPath = logPath;
    this.proc = null;
    this.log = createWriteStream(logPath, { flags: "a" });
  }

  start() {
    this.log.write(`\n==== start ${this.name} ${new Date().toISOString()}\n`);
    const proc = spawn(this.bin, [], { env: { ...process.env, ...this.env }, stdio: ["ignore", "pipe", "pipe"] });
    proc.stdout.pipe(this.log, { end: false });
    proc.stderr.pipe(this.log, { end: false });
    proc.exited = once(proc, "exit");
    this.proc = proc;
  }

  /** Waits until GET /readyz on the admin address answers 200. */
  async ready(timeoutMs = 20000) {
    const url = `http://${this.env.ELLIPSIS_ADMIN_ADDR}/readyz`;
    const deadline = Date.now() + timeoutMs;
    let last = "";
    while (Date.now() < deadline) {
      if (this.proc.exitCode !== null) break;
      try {
        const res = await fetch(url);
        if (res.ok) return;
        last = `${res.status} ${await res.text()}`;
      } catch (err) {
        last = err.message;
      }
      await sleep(100);
    }
    const tail = readFileSync(this.logPath, "utf8").split("\n").slice(-15).join("\n");
    throw new Error(
      `e2e: ${this.name} not ready (${this.proc.exitCode !== null ? `exited ${this.proc.exitCode}` : last}). ` +
        `It needs Redis (${this.env.ELLIPSIS_REDIS_URL}) and NATS (${this.env.ELLIPSIS_NATS_URL}); .ci/run starts them.\n${tail}`,
    );
  }

  /** SIGTERM (graceful), then SIGKILL after graceMs. */
  async stop(graceMs = 15000) {
    const proc = this.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill("SIGTERM");
    const timer = setTimeout(() => proc.kill("SIGKILL"), graceMs);
    await proc.exited;
    clearTimeout(timer);
  }
}

/**
 * Starts worker and gateway (auth=none, seed timing unless env overrides)
 * and waits until both are ready. `env` adds settings to both services
 * (and overrides the gateway's auth=none and addresses);
 * `tag` names a second stack's logs (e2e-<tag>-gateway.log).
 * @param {{root: string, artifacts: string, env?: Record<string, string>, tag?: string}} opts
 */
export async function startStack({ root, artifacts, env = {}, tag = "" }) {
  const bins = await buildBinaries(root);
  const id = randomBytes(4).toString("hex");
  const common = {
    ELLIPSIS_REDIS_URL: process.env.ELLIPSIS_TEST_REDIS_URL || "redis://127.0.0.1:6379",
    ELLIPSIS_NATS_URL: process.env.ELLIPSIS_TEST_NATS_URL || "nats://127.0.0.1:4222",
    ELLIPSIS_KEY_PREFIX: `e2e-${id}:`,
    ELLIPSIS_SUBJECT_PREFIX: `e2e${id}`,
    ELLIPSIS_LOG_LEVEL: "info",
    ELLIPSIS_LOG_FORMAT: "console",
    ...env,
  };
  const logName = (svc) => join(artifacts, `e2e-${tag ? tag + "-" : ""}${svc}.log`);
  const [httpPort, gwAdmin, wkAdmin] = [await freePort(), await freePort(), await freePort()];
  const worker = new Service("presence-worker", join(bins.dir, "presence-worker"), { ...common, ELLIPSIS_ADMIN_ADDR: `127.0.0.1:${wkAdmin}` }, logName("presence-worker"));
  const gateway = new Service(
    "gateway",
    join(bins.dir, "gateway"),
    {
      ...common,
      ELLIPSIS_AUTH: "none",
      ELLIPSIS_HTTP_ADDR: `127.0.0.1:${httpPort}`,
      ELLIPSIS_ADMIN_ADDR: `127.0.0.1:${gwAdmin}`,
      ELLIPSIS_SHUTDOWN_DRAIN: "1s",
      ...env, // may override the gateway's defaults above (e.g. ELLIPSIS_AUTH)
    },
    logName("gateway"),
  );
  worker.start();
  gateway.start();
  try {
    await Promise.all([worker.ready(), gateway.ready()]);
  } catch (err) {
    await Promise.all([gateway.stop(2000), worker.stop(2000)]);
    throw err;
  }
  return {
    url: `http://127.0.0.1:${httpPort}`,
    gateway,
    worker,
    async stop() {
      await Promise.all([gateway.stop(), worker.stop()]);
      if (bins.temp) rmSync(bins.dir, { recursive: true, force: true });
    },
  };
}

/**
 * Starts the dev stack (`make run`'s ellipsis-dev: gateway and worker in
 * one process, auth none, and the demo page's chat service) on the test
 * Redis and NATS, and waits until it is ready.
 * @param {{root: string, artifacts: string, env?: Record<string, string>}} opts
 */
export async function startDevStack({ root, artifacts, env = {} }) {
  const bins = await buildBinaries(root);
  const id = randomBytes(4).toString("hex");
  const [httpPort, admin] = [await freePort(), await freePort()];
  const dev = new Service(
    "ellipsis-dev",
    join(bins.dir, "ellipsis-dev"),
    {
      ELLIPSIS_REDIS_URL: process.env.ELLIPSIS_TEST_REDIS_URL || "redis://127.0.0.1:6379",
      ELLIPSIS_NATS_URL: process.env.ELLIPSIS_TEST_NATS_URL || "nats://127.0.0.1:4222",
      ELLIPSIS_KEY_PREFIX: `e2e-dev-${id}:`,
      ELLIPSIS_SUBJECT_PREFIX: `e2edev${id}`,
      ELLIPSIS_HTTP_ADDR: `127.0.0.1:${httpPort}`,
      ELLIPSIS_ADMIN_ADDR: `127.0.0.1:${admin}`,
      ELLIPSIS_SHUTDOWN_DRAIN: "1s",
      ELLIPSIS_LOG_FORMAT: "console",
      ...env,
    },
    join(artifacts, "e2e-ellipsis-dev.log"),
  );
  dev.start();
  try {
    await dev.ready();
  } catch (err) {
    await dev.stop(2000);
    throw err;
  }
  return {
    url: `http://127.0.0.1:${httpPort}`,
    async stop() {
      await dev.stop();
      if (bins.temp) rmSync(bins.dir, { recursive: true, force: true });
    },
  };
}

/** The repository root, from clients/js/test/e2e. */
export const repoRoot = resolve(fileURLToPath(new URL(".", import.meta.url)), "..", "..", "..", "..");
