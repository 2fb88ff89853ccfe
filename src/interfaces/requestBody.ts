import type { IncomingMessage } from 'node:http';
import type { z } from 'zod';
import { BridgeError, ErrorCode } from '../errors.js';
import { describeIssues } from '../wire/envelope.js';

/**
 * A request's JSON body, refused past `maxBytes` (TEXT_TOO_LARGE, read no further) or when it
 * is not JSON (BAD_REQUEST). An empty body is `{}` where an interface lets one stand for "no
 * arguments", and not JSON where it does not.
 */
export async function readJsonBody(
  req: IncomingMessage,
  {
    maxBytes = Number.POSITIVE_INFINITY,
    emptyIsObject = true,
  }: { maxBytes?: number; emptyIsObject?: boolean } = {},
): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) {
      throw new BridgeError(
        ErrorCode.textTooLarge,
        `request body over ${maxBytes} bytes; send a shorter text`,
      );
    }
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text === '' && emptyIsObject) return {};
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new BridgeError(ErrorCode.badRequest, `request body is not JSON: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

/** A request body checked against its schema (zod at the edge); BAD_REQUEST names what is wrong. */
export function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.output<T> {
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  throw new BridgeError(ErrorCode.badRequest, `bad request: ${describeIssues(result.error, 'body')}`);
}
