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
