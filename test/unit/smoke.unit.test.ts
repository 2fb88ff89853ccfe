import { describe, expect, it } from 'vitest';
import { BridgeError, ErrorCode, toBridgeError } from '../../src/errors.js';

describe('errors', () => {
  it('wraps unknown throwables with a stable code and keeps the cause', () => {
    const cause = new Error('boom');
    const err = toBridgeError(cause);
    expect(err).toBeInstanceOf(BridgeError);
    expect(err.code).toBe(ErrorCode.internal);
    expect(err.cause).toBe(cause);
  });
});
