// What would be published is what is tested, in Node: the tarball `npm pack`
// makes holds exactly the package's files, installs offline into a scratch
// project, and that project imports the package by name. Every entry of
// package.json "exports" (a later "./react" too) must resolve there to a file
// in the tarball. scripts/test.sh runs this even with ELLIPSIS_JS_SKIP_E2E=1;
// test/e2e/pack.test.js imports the same install in Chromium.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { packAndInstall, packageDir, packageName, exportTargets } from "./pack.js";

const run = promisify(execFile);
const source = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8"));

let pack;
before(async () => {
  pack = await packAndInstall();
}, { timeout: 120_000 });
after(() => pack && pack.cleanup());

test("the tarball holds LICENSE, README.md, package.json and src/ (.js, .d.ts) only", () => {
  for (const f of ["LICENSE", "README.md", "package.json", "src/ellipsis.js", "src/ellipsis.d.ts"]) assert.ok(pack.files.includes(f), `${f} is in the tarball`);
  const stray = pack.files.filter((f) => !["LICENSE", "README.md", "package.json"].includes(f) && !/^src\/[\w\/-]+\.(js|d\.ts)$/.test(f));
  assert.deepEqual(stray, [], "no tests, demo, embed.go, go.mod, scripts or types/ in the tarball");
  // Every module the entry point can import is in it (relative .js imports, see test/unit/package.test.js).
  for (const f of pack.files.filter((f) => f.endsWith(".js"))) {
    const src = readFileSync(join(pack.installed, f), "utf8");
    for (const m of src.matchAll(/^\s*(?:import|export)\s[^;]*?from\s+"(\.[^"]+)"/gm)) {
      const target = join(f, "..", m[1]);
      assert.ok(pack.files.includes(target), `${f} imports ${m[1]}, which is in the tarball`);
    }
  }
});

test("the installed package.json is the source's, with its license file", () => {
  const installed = JSON.parse(readFileSync(join(pack.installed, "package.json"), "utf8"));
  assert.equal(installed.name, packageName);
  assert.equal(installed.version, source.version);
  assert.deepEqual(installed.exports, source.exports);
  assert.equal(installed.license, "Apache-2.0");
  assert.match(readFileSync(join(pack.installed, "LICENSE"), "utf8"), /Apache License\s+Version 2\.0/);
  for (const t of exportTargets(installed.exports)) assert.ok(pack.files.includes(t.replace(/^\.\//, "")), `exports target ${t} is in the tarball`);
});

test("a scratch project imports the package by name, and every exports entry resolves", async () => {
  // Run from the scratch project, so resolution goes through its
  // node_modules and the package's "exports", as a consumer's would.
  const script = join(pack.project, "check.mjs");
  writeFileSync(
    script,
    `import * as sdk from ${JSON.stringify(packageName)};
import { readFileSync } from "node:fs";
const pkg = JSON.parse(readFileSync(new URL(import.meta.resolve(${JSON.stringify(packageName + "/package.json")})), "utf8"));
const resolved = {};
for (const sub of Object.keys(pkg.exports)) resolved[sub] = import.meta.resolve(${JSON.stringify(packageName)} + sub.slice(1));
const exports = Object.fromEntries(Object.entries(sdk).map(([k, v]) => [k, typeof v]));
console.log(JSON.stringify({ exports, version: sdk.VERSION, resolved }));
`,
  );
  const { stdout } = await run(process.execPath, ["--disable-warning=ExperimentalWarning", script], { cwd: pack.project });
  const got = JSON.parse(stdout);

  assert.equal(got.version, source.version, "VERSION is the package's version");
  const want = { Client: "function", connect: "function", formatTypists: "function", TypingIndicator: "function", TypingTimer: "function", TypistStore: "function", AntiFlicker: "function", TYPING_CSS: "string" };
  for (const [name, type] of Object.entries(want)) assert.equal(got.exports[name], type, `export ${name} is a ${type}`);

  assert.deepEqual(Object.keys(got.resolved).sort(), Object.keys(source.exports).sort());
  for (const [sub, url] of Object.entries(got.resolved)) {
    assert.ok(url.startsWith("file:"), `${sub} resolves to a file (${url})`);
    const path = fileURLToPath(url);
    assert.ok(path.startsWith(pack.installed + "/"), `${sub} resolves inside the installed package (${path})`);
    assert.ok(existsSync(path), `${sub} resolves to a file that exists (${path})`);
  }
});
