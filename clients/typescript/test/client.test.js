// The TypeScript client against a running gateway (ENGRAM_URL, ENGRAM_API_KEY): tests/integration/
// test_typescript_client.py starts one and runs `node --test` here. Every operation, typed as the schema says,
// and engram's error codes.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { EngramAPIError, EngramClient } from "../src/index.js";

const baseUrl = process.env.ENGRAM_URL;
const apiKey = process.env.ENGRAM_API_KEY;
if (!baseUrl || !apiKey) {
  throw new Error("set ENGRAM_URL and ENGRAM_API_KEY to a running gateway and a key for it");
}
const engram = new EngramClient({ baseUrl, apiKey });
const talk = [
  { role: "user", content: "I live in Lisbon." },
  { role: "assistant", content: "Nice!" },
  { role: "user", content: "I prefer green tea." },
];

/** @param {Promise<unknown>} promise */
async function refusal(promise) {
  await assert.rejects(promise, EngramAPIError);
  return /** @type {EngramAPIError} */ (await promise.catch((error) => error));
}

test("ingest is idempotent and its session has a memory status", async () => {
  const user = `alice-${randomUUID()}`;
  const first = await engram.ingest(user, "c1", talk, { metadata: { app: "node" }, idempotencyKey: "k1" });
  const again = await engram.ingest(user, "c1", talk, { metadata: { app: "node" }, idempotencyKey: "k1" });
  assert.equal(first.message_ids.length, 3);
  assert.equal(first.replayed, false);
  assert.equal(again.replayed, true);
  assert.deepEqual(again.message_ids, first.message_ids);
  const status = await engram.memoryStatus(user, "c1");
  assert.equal(status.messages, 3);
  assert.equal(status.session_key, "c1");
  const exported = await engram.export(user);
  assert.deepEqual(
    exported.messages.map((/** @type {{ content: string }} */ m) => m.content),
    talk.map((m) => m.content),
  );
});

test("a memory is written, found, packed into context, changed and deleted", async () => {
  const user = `bob-${randomUUID()}`;
  const written = await engram.addMemory(user, {
    key: "drink",
    value: "Prefers green tea",
    namespace: "tacit/preferences",
    tags: ["x"],
  });
  assert.equal(written.action, "added");
  const id = written.memory.id;
  const detail = await engram.getMemory(user, id);
  assert.equal(detail.value, "Prefers green tea");
  assert.deepEqual(detail.sources, []);
  assert.deepEqual(
    (await engram.memories(user, { namespace: "tacit" })).map((m) => m.id),
    [id],
  );
  const found = await engram.search(user, "green tea", { limit: 5 });
  assert.ok(found.some((hit) => hit.id === id && hit.source === "memory"));
  const packed = await engram.context(user, { query: "green tea", max_tokens: 200 });
  assert.match(packed.context, /Prefers green tea/);
  assert.ok(packed.tokens <= 200);
  assert.ok(packed.sections.every((section) => typeof section.name === "string"));

  const changed = await engram.updateMemory(user, id, { value: "Prefers jasmine tea" });
  assert.equal(changed.action, "superseded");
  assert.equal(changed.replaced_id, id);
  await engram.deleteMemory(user, changed.memory.id);
  assert.deepEqual(await engram.memories(user), []);
});

test("refusals carry engram's status and code", async () => {
  const user = `carol-${randomUUID()}`;
  const missing = await refusal(engram.getMemory(user, 999_999));
  assert.equal(missing.status, 404);
  assert.equal(missing.code, "not_found");
  // A role the schema does not know: what a caller without the types could send.
  const bad = /** @type {any} */ ([{ role: "robot", content: "beep" }]);
  const invalid = await refusal(engram.ingest(user, "c1", bad));
  assert.equal(invalid.status, 422);
  assert.equal(invalid.code, "validation_error");
  const stranger = new EngramClient({ baseUrl, apiKey: "egm_wrong" });
  const unauthorized = await refusal(stranger.memories(user));
  assert.equal(unauthorized.status, 401);
  assert.equal(unauthorized.code, "unauthorized");
});
