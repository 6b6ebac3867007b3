// The package as a consumer sees it: package.json exports, every runtime
// export declared in the hand-written types, no runtime dependencies, and a
// module graph the gateway can serve as is (relative .js imports only).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));

test("package.json: ES module with exports, version, types, no runtime dependencies", async () => {
  assert.equal(pkg.type, "module");
  assert.match(pkg.version, /^\d+\.\d+\.\d+/);
  assert.equal(pkg.exports["."].default, "./src/ellipsis.js");
  assert.equal(pkg.exports["."].types, "./src/ellipsis.d.ts");
  assert.equal(pkg.dependencies, undefined, "no runtime dependencies");
  const sdk = await import(join(root, pkg.exports["."].default));
  assert.equal(sdk.VERSION, pkg.version, "VERSION matches package.json");
});

test("package.json: publishable (license, repository, homepage, bugs, public access, files, engines)", () => {
  assert.equal(pkg.name, "@ellipsis-chat/client");
  assert.equal(pkg.license, "Apache-2.0");
  assert.deepEqual(pkg.repository, { type: "git", url: "git+https://github.com/ellipsis-chat/ellipsis.git", directory: "clients/js" });
  assert.equal(pkg.homepage, "https://github.com/ellipsis-chat/ellipsis/tree/main/clients/js#readme");
  assert.deepEqual(pkg.bugs, { url: "https://github.com/ellipsis-chat/ellipsis/issues" });
  assert.equal(pkg.publishConfig?.access, "public", "a scoped package is private on npm unless published with access public");
  assert.equal(pkg.private, undefined, "not private");
  assert.deepEqual([...pkg.files].sort(), ["LICENSE", "README.md", "src"]);
  // engines warns (or, with engine-strict, refuses) consumers on older
  // Node: only a lower bound on Node, nothing for bundlers or browsers.
  assert.deepEqual(Object.keys(pkg.engines), ["node"]);
  assert.match(pkg.engines.node, /^>=\d+$/);
  // Nothing runs on npm pack / install that could need the network.
  for (const s of ["prepare", "prepack", "postpack", "prepublishOnly", "preinstall", "install", "postinstall"]) {
    assert.equal(pkg.scripts?.[s], undefined, `no "${s}" lifecycle script`);
  }
});

test("LICENSE is the repository's Apache-2.0 text", () => {
  const own = readFileSync(join(root, "LICENSE"), "utf8");
  assert.equal(own, readFileSync(join(root, "..", "..", "LICENSE"), "utf8"));
  assert.match(own, /Apache License\s+Version 2\.0/);
});

test("README links are absolute (they must work on the npm package page)", () => {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const links = [...readme.matchAll(/\]\(([^)\s]+)/g)].map((m) => m[1]);
  for (const l of links) assert.match(l, /^(https:\/\/|#)/, `README link ${l} is absolute`);
  assert.doesNotMatch(readme, /published package/);
});

test("every runtime export is declared in ellipsis.d.ts, and nothing more", async () => {
  const sdk = await import(join(root, "src", "ellipsis.js"));
  const dts = readFileSync(join(root, "src", "ellipsis.d.ts"), "utf8");
  const declared = new Set(
    [...dts.matchAll(/^export declare (?:const|function|class) (\w+)/gm)].map((m) => m[1]),
  );
  assert.deepEqual([...Object.keys(sdk)].sort(), [...declared].sort());
});

test("sources import only relative .js files (servable without a build step)", () => {
  for (const f of readdirSync(join(root, "src")).filter((f) => f.endsWith(".js"))) {
    const src = readFileSync(join(root, "src", f), "utf8");
    for (const m of src.matchAll(/^\s*(?:import|export)\s[^;]*?from\s+"([^"]+)"/gm)) {
      // The React binding imports its peer, react, and nothing else bare.
      const ok = f === "react.js" ? /^(react|\.\/[\w-]+\.js)$/ : /^\.\/[\w-]+\.js$/;
      assert.match(m[1], ok, `${f} imports ${m[1]}`);
    }
  }
});

test("./react: exported with its types, react an optional peer (>= 18), every export declared in react.d.ts", async () => {
  assert.deepEqual(pkg.exports["./react"], { types: "./src/react.d.ts", default: "./src/react.js" });
  assert.equal(pkg.peerDependencies?.react, ">=18");
  assert.equal(pkg.peerDependenciesMeta?.react?.optional, true);
  const mod = await import(join(root, pkg.exports["./react"].default));
  const dts = readFileSync(join(root, "src", "react.d.ts"), "utf8");
  assert.doesNotMatch(dts, /from "react"/, "no @types/react needed");
  const declared = [...dts.matchAll(/^export declare (?:const|function|class) (\w+)/gm)].map((m) => m[1]);
  assert.deepEqual(Object.keys(mod).sort(), declared.sort());
});
