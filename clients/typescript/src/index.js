// @ts-check
/**
 * engramhq's TypeScript client: the memory API (ingest, memory status, context, search, memories, export)
 * over the platform's `fetch` (Node 18+, browsers, Deno, Bun), with no runtime dependencies. Request and
 * response types are the gateway's OpenAPI components, generated into types/schema.d.ts (`npm run generate`).
 *
 *   import { EngramClient } from "engramhq-client";
 *   const engram = new EngramClient({ baseUrl: "http://127.0.0.1:8000", apiKey });
 *   await engram.ingest("alice", "chat-1", [{ role: "user", content: "I live in Lisbon." }]);
 *   await engram.waitUntilIdle("alice", "chat-1");
 *   console.log((await engram.context("alice", { query: "Where do I live?", max_tokens: 500 })).context);
 */

/**
 * @typedef {import("../types/schema.d.ts").components["schemas"]} Schemas
 * @typedef {Schemas["IngestMessageIn"]} IngestMessage
 * @typedef {Schemas["IngestAccepted"] & { replayed: boolean }} Ingested
 * @typedef {Schemas["MemoryStatusOut"]} MemoryStatus
 * @typedef {Schemas["ContextIn"]} ContextRequest
 * @typedef {Schemas["ContextOut"]} Context
 * @typedef {Omit<Schemas["SearchIn"], "query">} SearchOptions
 * @typedef {Schemas["SearchResultOut"]} SearchResult
 * @typedef {Schemas["MemoryIn"]} NewMemory
 * @typedef {Schemas["MemoryPatch"]} MemoryPatch
 * @typedef {Schemas["MemoryOut"]} Memory
 * @typedef {Schemas["MemoryDetailOut"]} MemoryDetail
 * @typedef {Schemas["MemoryWriteOut"]} MemoryWrite
 * @typedef {{ namespace?: string, kind?: string, tag?: string, include_superseded?: boolean, limit?: number, offset?: number }} MemoryQuery
 */

/** The gateway refused a request: HTTP `status`, engram's stable `code` (e.g. not_found) and its `detail`. */
export class EngramAPIError extends Error {
  /**
   * @param {number} status
   * @param {string} code
   * @param {unknown} detail
   */
  constructor(status, code, detail) {
    super(`${status} ${code}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
    this.name = "EngramAPIError";
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

/** @param {string} part */
const seg = (part) => encodeURIComponent(part);

export class EngramClient {
  /**
   * @param {{ baseUrl: string, apiKey: string, fetch?: typeof fetch }} options
   */
  constructor({ baseUrl, apiKey, fetch: send = globalThis.fetch }) {
    if (!apiKey) throw new TypeError("no API key: pass apiKey");
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.apiKey = apiKey;
    this.send = send;
  }

  /**
   * One request; a 4xx or 5xx answer throws EngramAPIError.
   * @param {string} method
   * @param {string} path
   * @param {{ body?: unknown, query?: Record<string, unknown>, headers?: Record<string, string> }} [options]
   * @returns {Promise<Response>}
   */
  async request(method, path, { body, query, headers = {} } = {}) {
    const url = new URL(this.baseUrl + path);
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
    }
    const response = await this.send(url, {
      method,
      headers: {
        Authorization: `Bearer ${this.apiKey}`,
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status >= 400) {
      const text = await response.text();
      /** @type {{ code?: string, detail?: unknown }} */
      let error = {};
      try {
        const parsed = JSON.parse(text);
        if (parsed && typeof parsed === "object") error = parsed;
      } catch {
        // Not engram's JSON error (a proxy's page, say): the text is the detail.
      }
      throw new EngramAPIError(response.status, error.code ?? "http_error", error.detail ?? text);
    }
    return response;
  }

  /**
   * @template T
   * @param {string} method
   * @param {string} path
   * @param {{ body?: unknown, query?: Record<string, unknown>, headers?: Record<string, string> }} [options]
   * @returns {Promise<T>}
   */
  async json(method, path, options) {
    return /** @type {Promise<T>} */ ((await this.request(method, path, options)).json());
  }

  /**
   * Store messages of a conversation engram does not run (in order); extraction follows.
   * @param {string} userId
   * @param {string} sessionKey
   * @param {IngestMessage[]} messages
   * @param {{ metadata?: Record<string, unknown>, idempotencyKey?: string }} [options]
   * @returns {Promise<Ingested>}
   */
  async ingest(userId, sessionKey, messages, { metadata, idempotencyKey } = {}) {
    const response = await this.request("POST", `/v1/users/${seg(userId)}/sessions/${seg(sessionKey)}/messages`, {
      body: metadata === undefined ? { messages } : { messages, metadata },
      headers: idempotencyKey ? { "Idempotency-Key": idempotencyKey } : {},
    });
    /** @type {Schemas["IngestAccepted"]} */
    const accepted = await response.json();
    return { ...accepted, replayed: response.headers.get("Idempotent-Replayed") === "true" };
  }

  /**
   * @param {string} userId
   * @param {string} sessionKey
   * @returns {Promise<MemoryStatus>}
   */
  memoryStatus(userId, sessionKey) {
    return this.json("GET", `/v1/users/${seg(userId)}/sessions/${seg(sessionKey)}/memory-status`);
  }

  /**
   * Poll memory-status until every message is mined and every memory embedded; rejects after `timeoutMs`.
   * @param {string} userId
   * @param {string} sessionKey
   * @param {{ timeoutMs?: number, intervalMs?: number }} [options]
   * @returns {Promise<MemoryStatus>}
   */
  async waitUntilIdle(userId, sessionKey, { timeoutMs = 60_000, intervalMs = 500 } = {}) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const status = await this.memoryStatus(userId, sessionKey);
      if (status.idle) return status;
      if (Date.now() >= deadline) {
        throw new Error(`session ${sessionKey} not idle after ${timeoutMs} ms: ${status.pending_messages} pending`);
      }
      await new Promise((resolve) => setTimeout(resolve, intervalMs));
    }
  }

  /**
   * A fenced context block for your prompt, at most `max_tokens` tokens.
   * @param {string} userId
   * @param {ContextRequest} [request]
   * @returns {Promise<Context>}
   */
  context(userId, request = {}) {
    return this.json("POST", `/v1/users/${seg(userId)}/context`, { body: request });
  }

  /**
   * @param {string} userId
   * @param {string} query
   * @param {SearchOptions} [options]
   * @returns {Promise<SearchResult[]>}
   */
  async search(userId, query, options = {}) {
    /** @type {Schemas["SearchOut"]} */
    const found = await this.json("POST", `/v1/users/${seg(userId)}/memories/search`, {
      body: { query, ...options },
    });
    return found.results;
  }

  /**
   * @param {string} userId
   * @param {NewMemory} memory
   * @returns {Promise<MemoryWrite>}
   */
  addMemory(userId, memory) {
    return this.json("POST", `/v1/users/${seg(userId)}/memories`, { body: memory });
  }

  /**
   * @param {string} userId
   * @param {MemoryQuery} [query]
   * @returns {Promise<Memory[]>}
   */
  memories(userId, query = {}) {
    return this.json("GET", `/v1/users/${seg(userId)}/memories`, { query });
  }

  /**
   * The memory and the messages it was learned from.
   * @param {string} userId
   * @param {number} memoryId
   * @returns {Promise<MemoryDetail>}
   */
  getMemory(userId, memoryId) {
    return this.json("GET", `/v1/users/${seg(userId)}/memories/${memoryId}`);
  }

  /**
   * A new `value` supersedes the memory; tags, confidence, decay_rate and event_time change it in place.
   * @param {string} userId
   * @param {number} memoryId
   * @param {MemoryPatch} patch
   * @returns {Promise<MemoryWrite>}
   */
  updateMemory(userId, memoryId, patch) {
    return this.json("PATCH", `/v1/users/${seg(userId)}/memories/${memoryId}`, { body: patch });
  }

  /**
   * @param {string} userId
   * @param {number} memoryId
   * @returns {Promise<void>}
   */
  async deleteMemory(userId, memoryId) {
    await this.request("DELETE", `/v1/users/${seg(userId)}/memories/${memoryId}`);
  }

  /**
   * Everything engram holds about the user (the shape `engram import` reads back).
   * @param {string} userId
   * @returns {Promise<Record<string, any>>}
   */
  export(userId) {
    return this.json("GET", `/v1/users/${seg(userId)}/export`);
  }
}
