// What every browser test needs besides the stack: headless Chromium with
// this machine's flags, and a second origin (a static page server on its own
// loopback port) for pages that talk to the gateway cross-origin.

import { createServer } from "node:http";
import { existsSync } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { extname, join, resolve, sep } from "node:path";
import { once } from "node:events";
import { chromium } from "playwright-core";

export const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

// The flags this machine needs (no outside network, no GPU, root). Playwright
// starts every launch on a fresh temporary --user-data-dir of its own (and
// refuses one in args), so the profile is always clean.
export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Launches headless Chromium; throws a clear error when it is missing. */
export async function launchChromium() {
  if (!existsSync(CHROMIUM)) throw new Error(`e2e: no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM)`);
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
}

/**
 * Serves fixed files on 127.0.0.1 at a free port: an origin of its own,
 * e.g. an app page that loads the SDK from the gateway's origin.
 * `files` maps a path ("/index.html") to its body and content type;
 * anything else is a 404. Close it with `close()`.
 * @param {Record<string, {body: string | Buffer, type?: string}>} files
 * @returns {Promise<{origin: string, close: () => Promise<void>}>}
 */
export async function serveOrigin(files) {
  const srv = createServer((req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    const f = files[path];
    if (!f || (req.method !== "GET" && req.method !== "HEAD")) {
      res.writeHead(404, { "Content-Type": "text/plain" }).end("not found\n");
      return;
    }
    res.writeHead(200, { "Content-Type": f.type || "text/html; charset=utf-8", "Cache-Control": "no-store" });
    res.end(req.method === "HEAD" ? undefined : f.body);
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const { port } = srv.address();
  return {
    origin: `http://127.0.0.1:${port}`,
    async close() {
      srv.closeAllConnections();
      srv.close();
      await once(srv, "close");
    },
  };
}

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".json": "application/json",
  ".ts": "text/plain; charset=utf-8",
};

/**
 * Serves a folder's files on 127.0.0.1 at a free port (GET and HEAD; a
 * path outside the folder, a directory or a missing file is a 404), plus
 * fixed `files` that take precedence, as serveOrigin does. For pages that
 * load modules from a scratch project's node_modules without a bundler.
 * @param {string} dir
 * @param {Record<string, {body: string | Buffer, type?: string}>} [files]
 * @returns {Promise<{origin: string, close: () => Promise<void>}>}
 */
export async function serveFolder(dir, files = {}) {
  const root = resolve(dir);
  const srv = createServer(async (req, res) => {
    const notFound = () => res.writeHead(404, { "Content-Type": "text/plain" }).end("not found\n");
    if (req.method !== "GET" && req.method !== "HEAD") return notFound();
    let path;
    try {
      path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    } catch {
      return notFound();
    }
    let body = files[path]?.body;
    let type = files[path]?.type;
    if (body === undefined) {
      const file = resolve(join(root, path));
      if (!file.startsWith(root + sep)) return notFound();
      try {
        if (!(await stat(file)).isFile()) return notFound();
        body = await readFile(file);
      } catch {
        return notFound();
      }
      type = TYPES[extname(file)] || "application/octet-stream";
    }
    res.writeHead(200, { "Content-Type": type || "text/html; charset=utf-8", "Cache-Control": "no-store" });
    res.end(req.method === "HEAD" ? undefined : body);
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const { port } = srv.address();
  return {
    origin: `http://127.0.0.1:${port}`,
    async close() {
      srv.closeAllConnections();
      srv.close();
      await once(srv, "close");
    },
  };
}
