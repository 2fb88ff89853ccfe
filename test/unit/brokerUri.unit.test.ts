import { describe, expect, it } from 'vitest';
import { withHeartbeat } from '../../src/federation/BrokerActor.js';

describe('the broker URI the gateway connects with', () => {
  it('asks for the configured AMQP heartbeat', () => {
    expect(withHeartbeat('amqp://guest:guest@127.0.0.1:5672', 5)).toBe(
      'amqp://guest:guest@127.0.0.1:5672?heartbeat=5',
    );
  });

  it('keeps the vhost, credentials and other parameters as written', () => {
    expect(withHeartbeat('amqps://gw-a:p%40ss@broker.example/%2F?frameMax=4096', 3)).toBe(
      'amqps://gw-a:p%40ss@broker.example/%2F?frameMax=4096&heartbeat=3',
    );
  });

  it('leaves a heartbeat the operator put in the URI alone', () => {
    const uri = 'amqp://broker.example/?heartbeat=30';
    expect(withHeartbeat(uri, 5)).toBe(uri);
  });
});
