// docs/asyncapi.yaml, the machine-readable wire contract (docs/protocol.md),
// as a maintained AsyncAPI parser reads it: it must parse without an
// error-severity diagnostic, and every message example must validate
// against its message's payload schema (ajv, the validator the parser
// itself uses). The Go side (deploy/asyncapi_test.go) checks the same
// document against the Go decoders and constructors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { Parser, DiagnosticSeverity } from "@asyncapi/parser";
import Ajv from "ajv";

const docPath = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "docs", "asyncapi.yaml");
const source = readFileSync(docPath, "utf8");

async function parse(text) {
  const { document, diagnostics } = await new Parser().parse(text, { source: docPath });
  return { document, diagnostics };
}

// The document is parsed once for the tests that only read it.
let parsed;
const parseSource = () => (parsed ??= parse(source));

// validator compiles each message's dereferenced payload schema. The parser
// adds x-parser-* annotations, hence strict: false.
function validator() {
  const ajv = new Ajv({ strict: false, allErrors: true });
  return (schema) => ajv.compile(schema);
}

// messages lists every message of the document once (by id), with its
// compiled schema and its examples.
function messages(document) {
  const compile = validator();
  return document.allMessages().all().map((m) => ({
    id: m.id(),
    validate: compile(m.payload().json()),
    examples: m.examples().all().map((e) => ({ name: e.name(), payload: e.payload() })),
  }));
}

test("docs/asyncapi.yaml parses with no error diagnostics", async () => {
  const { document, diagnostics } = await parseSource();
  const errors = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error);
  assert.deepEqual(
    errors.map((d) => `${d.code}: ${d.message} at ${d.path.join(".")}`),
    [],
    "error diagnostics",
  );
  assert.ok(document, "a parsed document");
  assert.equal(document.version(), "3.0.0");
  assert.equal(document.info().version(), "1", "wire contract v1");
});

test("every message has a payload schema and an example that validates against it", async () => {
  const { document } = await parseSource();
  const all = messages(document);
  // The WebSocket frames, the NATS payloads and the Redis room events.
  for (const id of [
    "join", "leave", "typingStartCommand", "typingStopCommand", "sync", "ping",
    "joined", "left", "typingStart", "typingStop", "typing", "pong", "error",
    "command", "snapshotRequest", "snapshotReply", "authzRequest", "authzReply",
    "natsTypingStart", "natsTypingStop",
  ]) {
    assert.ok(all.some((m) => m.id === id), `message ${id} is described`);
  }
  for (const m of all) {
    assert.ok(m.examples.length > 0, `message ${m.id} has an example`);
    for (const ex of m.examples) {
      const ok = m.validate(ex.payload);
      assert.ok(ok, `${m.id} example ${ex.name}: ${JSON.stringify(m.validate.errors)}`);
    }
  }
});

test("the schemas refuse what the contract refuses", async () => {
  const { document } = await parseSource();
  const byId = Object.fromEntries(messages(document).map((m) => [m.id, m.validate]));
  const refused = {
    join: [{ type: "join" }, { type: "join", room: "" }, { type: "join", room: "a\nb" }, { type: "join", room: "x".repeat(257) }],
    command: [
      { v: 1, op: "start", room: "42", user: "alice" }, // start needs conn
      { v: 1, op: "disconnect", room: "42", user: "alice", conn: "c" }, // disconnect takes rooms
      { v: 1, op: "stop", rooms: ["42"], user: "alice" }, // rooms only with disconnect
      { v: 2, op: "stop", room: "42", user: "alice" },
      { v: 1, op: "jump", room: "42", user: "alice" },
    ],
    typingStop: [{ v: 1, type: "typing_stop", room: "42", user: "alice", reason: "bored", ts_ms: 1 }],
    joined: [{ type: "joined", room: "42", typing: [] }], // total is required
    snapshotReply: [{ v: 1, room: "42", users: [], total: -1 }],
  };
  for (const [id, payloads] of Object.entries(refused)) {
    for (const p of payloads) {
      assert.equal(byId[id](p), false, `${id} must refuse ${JSON.stringify(p)}`);
    }
  }
});

test("a broken document is reported with an error diagnostic", async () => {
  const broken = source.replace("$ref: '#/components/messages/command'", "$ref: '#/components/messages/nope'");
  assert.notEqual(broken, source);
  const { diagnostics } = await parse(broken);
  assert.ok(diagnostics.some((d) => d.severity === DiagnosticSeverity.Error), "an error diagnostic");
});
