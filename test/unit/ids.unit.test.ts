import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { uuidv7 } from '../../src/wire/ids.js';

describe('uuidv7', () => {
  it('is a valid version-7 UUID that the envelope schema accepts', () => {
    const id = uuidv7(1_700_000_000_000);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(z.string().uuid().safeParse(id).success).toBe(true);
  });

  it('sorts by time across milliseconds', () => {
    const ids = [3, 1, 2].map((ms) => uuidv7(1_700_000_000_000 + ms));
    expect([...ids].sort()).toEqual([ids[1], ids[2], ids[0]]);
  });

  it('carries the milliseconds in its first 48 bits and random bits after them', () => {
    const ms = 1_700_000_000_123;
    const ids = Array.from({ length: 10_000 }, () => uuidv7(ms));
    for (const id of ids.slice(0, 10)) {
      expect(Number.parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(ms);
    }
    expect(new Set(ids).size).toBe(ids.length);
    expect(new Set(ids.map((id) => id.slice(15))).size).toBe(ids.length);
  });
});
