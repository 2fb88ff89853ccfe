import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { nextInjection, type PumpView } from '../../src/machines/nextInjection.js';

interface Queued {
  id: number;
  state: string;
}

const ready: PumpView = { injecting: true, paneReady: true };
const queue = (...states: string[]): Queued[] => states.map((state, id) => ({ id, state }));

describe('nextInjection: the FIFO pump decision', () => {
  it('types the oldest pending delivery when the pane is ready', () => {
    const q = queue('pending', 'pending');
    expect(nextInjection(ready, q)).toEqual({ verdict: 'inject', delivery: q[0] });
  });

  it('passes over submitted ones waiting for their ack', () => {
    const q = queue('submitted', 'submitted', 'pending');
    expect(nextInjection(ready, q)).toEqual({ verdict: 'inject', delivery: q[2] });
  });

  it.each([
    'injecting',
    'typed',
    'unsubmitted',
    'waiting-pane',
    'verifying',
    'backoff',
    'held',
    'handed-over',
  ])('a head in %s keeps the rest waiting', (head) => {
    expect(nextInjection(ready, queue('submitted', head, 'pending'))).toEqual({
      verdict: 'wait',
      why: 'head-in-flight',
    });
  });

  it('types nothing without an injector or inject mode, or while the pane is busy', () => {
    const q = queue('pending');
    expect(nextInjection({ injecting: false, paneReady: true }, q)).toEqual({
      verdict: 'wait',
      why: 'not-injecting',
    });
    expect(nextInjection({ injecting: true, paneReady: false }, q)).toEqual({
      verdict: 'wait',
      why: 'pane-busy',
    });
    expect(nextInjection(ready, queue('submitted'))).toEqual({ verdict: 'wait', why: 'empty' });
    expect(nextInjection(ready, [])).toEqual({ verdict: 'wait', why: 'empty' });
  });

  it('reads the queue only up to its head', () => {
    let read = 0;
    function* lazy(): Generator<Queued> {
      for (const item of queue('submitted', 'pending', 'pending', 'pending')) {
        read += 1;
        yield item;
      }
    }
    expect(nextInjection(ready, lazy())).toMatchObject({ verdict: 'inject', delivery: { id: 1 } });
    expect(read).toBe(2);
  });

  // A simulated entity: the pump runs after every step, as the actor runs it after every
  // transition; a typed message is submitted, retried (back to pending) or dead-lettered.
  it('property: one in flight at a time, typed in arrival order, each pending one typed in the end', () => {
    const outcome = fc.constantFrom('submitted', 'retried', 'dead-lettered', 'acked');
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.array(fc.tuple(outcome, fc.boolean()), { minLength: 1, maxLength: 80 }),
        (count, steps) => {
          const fifo: Queued[] = queue(...Array.from({ length: count }, () => 'pending'));
          const typed: number[] = [];
          let paneReady = true;
          const pump = (): void => {
            const next = nextInjection({ injecting: true, paneReady }, fifo);
            if (next.verdict !== 'inject') return;
            expect(fifo.filter((d) => d.state === 'injecting')).toEqual([]);
            next.delivery.state = 'injecting';
            typed.push(next.delivery.id);
          };
          const settle = (how: string): void => {
            const inFlight = fifo.find((d) => d.state === 'injecting');
            const submitted = fifo.find((d) => d.state === 'submitted');
            if (how === 'acked' && submitted) fifo.splice(fifo.indexOf(submitted), 1);
            if (!inFlight) return;
            if (how === 'submitted') inFlight.state = 'submitted';
            else if (how === 'retried') inFlight.state = 'pending';
            else if (how === 'dead-lettered') fifo.splice(fifo.indexOf(inFlight), 1);
          };
          for (const [how, busy] of steps) {
            paneReady = !busy;
            pump();
            settle(how);
          }
          // Typing resumes where it stopped: the first typing of each message is in arrival order.
          const firsts = typed.filter((id, i) => typed.indexOf(id) === i);
          expect(firsts).toEqual([...firsts].sort((x, y) => x - y));
          // Once the pane stays ready and every typing submits, all that is pending gets typed.
          paneReady = true;
          for (let i = 0; i < count * 2; i += 1) {
            pump();
            settle('submitted');
          }
          expect(fifo.filter((d) => d.state !== 'submitted')).toEqual([]);
        },
      ),
      { numRuns: 500 },
    );
  });
});
