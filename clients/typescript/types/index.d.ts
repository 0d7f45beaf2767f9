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
    constructor(status: number, code: string, detail: unknown);
    status: number;
    code: string;
    detail: unknown;
}
export class EngramClient {
    /**
     * @param {{ baseUrl: string, apiKey: string, fetch?: typeof fetch }} options
     */
    constructor({ baseUrl, apiKey, fetch: send }: {
        baseUrl: string;
        apiKey: string;
        fetch?: typeof fetch;
    });
    baseUrl: string;
    apiKey: string;
    send: typeof fetch;
    /**
     * One request; a 4xx or 5xx answer throws EngramAPIError.
     * @param {string} method
     * @param {string} path
     * @param {{ body?: unknown, query?: Record<string, unknown>, headers?: Record<string, string> }} [options]
     * @returns {Promise<Response>}
     */
    request(method: string, path: string, { body, query, headers }?: {
        body?: unknown;
        query?: Record<string, unknown>;
        headers?: Record<string, string>;
    }): Promise<Response>;
    /**
     * @template T
     * @param {string} method
     * @param {string} path
     * @param {{ body?: unknown, query?: Record<string, unknown>, headers?: Record<string, string> }} [options]
     * @returns {Promise<T>}
     */
    json<T>(method: string, path: string, options?: {
        body?: unknown;
        query?: Record<string, unknown>;
        headers?: Record<string, string>;
    }): Promise<T>;
    /**
     * Store messages of a conversation engram does not run (in order); extraction follows.
     * @param {string} userId
     * @param {string} sessionKey
     * @param {IngestMessage[]} messages
     * @param {{ metadata?: Record<string, unknown>, idempotencyKey?: string }} [options]
     * @returns {Promise<Ingested>}
     */
    ingest(userId: string, sessionKey: string, messages: IngestMessage[], { metadata, idempotencyKey }?: {
        metadata?: Record<string, unknown>;
        idempotencyKey?: string;
    }): Promise<Ingested>;
    /**
     * @param {string} userId
     * @param {string} sessionKey
     * @returns {Promise<MemoryStatus>}
     */
    memoryStatus(userId: string, sessionKey: string): Promise<MemoryStatus>;
    /**
     * Poll memory-status until every message is mined and every memory embedded; rejects after `timeoutMs`.
     * @param {string} userId
     * @param {string} sessionKey
     * @param {{ timeoutMs?: number, intervalMs?: number }} [options]
     * @returns {Promise<MemoryStatus>}
     */
    waitUntilIdle(userId: string, sessionKey: string, { timeoutMs, intervalMs }?: {
        timeoutMs?: number;
        intervalMs?: number;
    }): Promise<MemoryStatus>;
    /**
     * A fenced context block for your prompt, at most `max_tokens` tokens.
     * @param {string} userId
     * @param {ContextRequest} [request]
     * @returns {Promise<Context>}
     */
    context(userId: string, request?: ContextRequest): Promise<Context>;
    /**
     * @param {string} userId
     * @param {string} query
     * @param {SearchOptions} [options]
     * @returns {Promise<SearchResult[]>}
     */
    search(userId: string, query: string, options?: SearchOptions): Promise<SearchResult[]>;
    /**
     * @param {string} userId
     * @param {NewMemory} memory
     * @returns {Promise<MemoryWrite>}
     */
    addMemory(userId: string, memory: NewMemory): Promise<MemoryWrite>;
    /**
     * @param {string} userId
     * @param {MemoryQuery} [query]
     * @returns {Promise<Memory[]>}
     */
    memories(userId: string, query?: MemoryQuery): Promise<Memory[]>;
    /**
     * The memory and the messages it was learned from.
     * @param {string} userId
     * @param {number} memoryId
     * @returns {Promise<MemoryDetail>}
     */
    getMemory(userId: string, memoryId: number): Promise<MemoryDetail>;
    /**
     * A new `value` supersedes the memory; tags, confidence, decay_rate and event_time change it in place.
     * @param {string} userId
     * @param {number} memoryId
     * @param {MemoryPatch} patch
     * @returns {Promise<MemoryWrite>}
     */
    updateMemory(userId: string, memoryId: number, patch: MemoryPatch): Promise<MemoryWrite>;
    /**
     * @param {string} userId
     * @param {number} memoryId
     * @returns {Promise<void>}
     */
    deleteMemory(userId: string, memoryId: number): Promise<void>;
    /**
     * Everything engram holds about the user (the shape `engram import` reads back).
     * @param {string} userId
     * @returns {Promise<Record<string, any>>}
     */
    export(userId: string): Promise<Record<string, any>>;
}
export type Schemas = import("../types/schema.d.ts").components["schemas"];
export type IngestMessage = Schemas["IngestMessageIn"];
export type Ingested = Schemas["IngestAccepted"] & {
    replayed: boolean;
};
export type MemoryStatus = Schemas["MemoryStatusOut"];
export type ContextRequest = Schemas["ContextIn"];
export type Context = Schemas["ContextOut"];
export type SearchOptions = Omit<Schemas["SearchIn"], "query">;
export type SearchResult = Schemas["SearchResultOut"];
export type NewMemory = Schemas["MemoryIn"];
export type MemoryPatch = Schemas["MemoryPatch"];
export type Memory = Schemas["MemoryOut"];
export type MemoryDetail = Schemas["MemoryDetailOut"];
export type MemoryWrite = Schemas["MemoryWriteOut"];
export type MemoryQuery = {
    namespace?: string;
    kind?: string;
    tag?: string;
    include_superseded?: boolean;
    limit?: number;
    offset?: number;
};
