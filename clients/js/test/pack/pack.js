// What would be published, as a consumer gets it: `npm pack` of clients/js
// into a temporary folder, and that tarball installed into a scratch project
// with `npm install --offline` (the package has no runtime dependencies, so
// nothing is fetched). Shared by test/pack/pack.test.js (Node) and
// test/e2e/pack.test.js (Chromium with an import map).

import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);

/** clients/js, the package's folder. */
export const packageDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The package's name, from its package.json. */
export const packageName = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8")).name;

// npm with no lifecycle scripts (nothing that could need the network) and
// no audit, fund or update checks; a failure names the command and its output.
async function npm(args, cwd) {
  try {
    const { stdout } = await run("npm", [...args, "--ignore-scripts", "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error"], {
      cwd,
      maxBuffer: 16 << 20,
      env: { ...process.env, npm_config_update_notifier: "false" },
    });
    return stdout;
  } catch (err) {
    throw new Error(`pack: npm ${args.join(" ")} (in ${cwd}) failed:\n${err.stderr || ""}${err.stdout || ""}${err.message}`);
  }
}

/**
 * Packs clients/js into a new temporary folder and installs the tarball
 * into a scratch project there (`{"type": "module", "private": true}`).
 * Remove everything with `cleanup()`.
 * @returns {Promise<{
 *   tarball: string,       // path of the .tgz
 *   files: string[],       // paths inside the tarball, sorted ("LICENSE", "src/client.js", …)
 *   project: string,       // the scratch project's folder
 *   installed: string,     // <project>/node_modules/<package name>
 *   cleanup: () => void,
 * }>}
 */
export async function packAndInstall() {
  const tmp = mkdtempSync(join(tmpdir(), "ellipsis-pack-"));
  try {
    const out = JSON.parse(await npm(["pack", "--json", "--pack-destination", tmp], packageDir));
    if (!Array.isArray(out) || out.length !== 1) throw new Error(`pack: npm pack --json gave ${JSON.stringify(out).slice(0, 200)}`);
    const tarball = join(tmp, out[0].filename);
    const files = out[0].files.map((f) => f.path).sort();

    const project = join(tmp, "project");
    mkdirSync(project);
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "ellipsis-pack-scratch", private: true, type: "module" }, null, 2) + "\n");
    await npm(["install", "--offline", "--no-package-lock", tarball], project);
    return { tarball, files, project, installed: join(project, "node_modules", ...packageName.split("/")), cleanup: () => rmSync(tmp, { recursive: true, force: true }) };
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Every file a package.json "exports" map points at (conditions and
 * subpaths flattened: "./src/ellipsis.js", "./src/ellipsis.d.ts", …), so a
 * check covers subpaths added later without knowing them.
 * @param {unknown} exportsField
 * @returns {string[]}
 */
export function exportTargets(exportsField) {
  if (typeof exportsField === "string") return [exportsField];
  if (Array.isArray(exportsField)) return exportsField.flatMap(exportTargets);
  if (exportsField && typeof exportsField === "object") return Object.values(exportsField).flatMap(exportTargets);
  return [];
}
