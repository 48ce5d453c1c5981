// Types of connect.js (the browser's Connect client), for the tests that import it in Node.
// Not served: the UI handler serves a fixed list of files.

/** An error of a call: `code` as Connect names it ("not_found"), `reason` from the ErrorDetail. */
export declare class RpcError extends Error {
  constructor(code: string, message: string, details?: unknown[]);
  readonly code: string;
  readonly details: unknown[];
  /** The ErrorDetail's reason without its prefix ("FILE_NOT_FOUND"), or "". */
  readonly reason: string;
}

/** Frames one message: flags byte, 4-byte big-endian length, the bytes. */
export declare function envelope(flags: number, bytes: Uint8Array): Uint8Array;

/** Reads envelopes from a byte stream, however its chunks split them. */
export declare function readEnvelopes(stream: ReadableStream<Uint8Array>): AsyncGenerator<{ flags: number; data: Uint8Array }>;

/** Options of one call. */
export interface CallOptions {
  signal?: AbortSignal;
  headers?: Record<string, string>;
}

/** A client for one server and one credential. */
export interface Client {
  unary(service: string, method: string, request: object, options?: CallOptions): Promise<any>;
  stream(service: string, method: string, request: object, options?: CallOptions): AsyncGenerator<any, void, undefined>;
}

export declare function createClient(options?: { baseUrl?: string; token?: string; fetch?: typeof fetch }): Client;
