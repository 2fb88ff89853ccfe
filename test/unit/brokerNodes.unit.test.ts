import { describe, expect, it } from 'vitest';
import { BrokerNodes } from '../../src/federation/BrokerNodes.js';

const uris = ['amqp://u:pw@n1:5701', 'amqp://u:pw@n2:5702', 'amqp://u:pw@n3:5703'];
const options = { retryBaseMs: 500, retryMaxMs: 15_000 };

describe('BrokerNodes: which broker node is next (R-TOP3)', () => {
  it('starts at the given node and stays on it while it answers', () => {
    const nodes = new BrokerNodes(uris, { ...options, start: 1 });
    expect(nodes.next(0)).toEqual({ index: 1, uri: uris[1], waitMs: 0 });
    nodes.connected(1);
    expect(nodes.currentNode()).toBe('amqp://u:***@n2:5702');
    expect(nodes.next(10)).toMatchObject({ index: 1, waitMs: 0 });
  });

  it('a lost node is passed over at once for the next; it waits out its own backoff', () => {
    const nodes = new BrokerNodes(uris, { ...options, start: 0 });
    nodes.connected(0);
    nodes.failed(0, 'connection closed', 1_000);
    expect(nodes.currentNode()).toBeNull();
    expect(nodes.next(1_000)).toEqual({ index: 1, uri: uris[1], waitMs: 0 });
    nodes.failed(1, 'ECONNREFUSED', 1_000);
    expect(nodes.next(1_000)).toEqual({ index: 2, uri: uris[2], waitMs: 0 });
    nodes.failed(2, 'ECONNREFUSED', 1_000);
    // All three wait: the one free soonest is next, after its wait.
    expect(nodes.next(1_200)).toEqual({ index: 0, uri: uris[0], waitMs: 300 });
  });

  it('backoff per node doubles with its failures, up to the cap, and connecting resets it', () => {
    const nodes = new BrokerNodes([uris[0] as string], { ...options, start: 0 });
    const waits: number[] = [];
    let now = 0;
    for (let i = 0; i < 8; i++) {
      nodes.failed(0, 'down', now);
      const { waitMs } = nodes.next(now);
      waits.push(waitMs);
      now += waitMs;
    }
    expect(waits).toEqual([500, 1_000, 2_000, 4_000, 8_000, 15_000, 15_000, 15_000]);
    nodes.connected(0);
    nodes.failed(0, 'down', now);
    expect(nodes.next(now).waitMs).toBe(500);
  });

  it('a node failing again is not retried before its backoff while another is free', () => {
    const nodes = new BrokerNodes(uris.slice(0, 2), { ...options, start: 0 });
    nodes.failed(0, 'down', 0);
    nodes.failed(0, 'down', 0); // its second failure: 1 s
    nodes.connected(1);
    nodes.failed(1, 'lost', 600);
    // Node 0 is still waiting (until 1,000); node 1 has just failed (until 1,100).
    expect(nodes.next(600)).toEqual({ index: 0, uri: uris[0], waitMs: 400 });
  });

  it('shows each node without its password: connected, standby or failing with its error', () => {
    const nodes = new BrokerNodes(uris, { ...options, start: 0 });
    nodes.failed(0, 'ECONNREFUSED', 0);
    nodes.connected(1);
    expect(nodes.view()).toEqual([
      {
        node: 'amqp://u:***@n1:5701',
        state: 'failing',
        failures: 1,
        lastError: 'ECONNREFUSED',
        retryAt: 500,
      },
      { node: 'amqp://u:***@n2:5702', state: 'connected', failures: 0, lastError: null, retryAt: null },
      { node: 'amqp://u:***@n3:5703', state: 'standby', failures: 0, lastError: null, retryAt: null },
    ]);
  });

  it('needs at least one node', () => {
    expect(() => new BrokerNodes([], { ...options, start: 0 })).toThrow(/at least one/);
  });
});
