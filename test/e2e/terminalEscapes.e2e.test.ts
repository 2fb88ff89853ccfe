import { randomUUID } from 'node:crypto';
import amqp, { type ChannelModel, type ConfirmChannel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlSpec, Exchange, inboxName, rosterKey } from '../../src/federation/topology.js';
import { DeadLetterHeader } from '../../src/wire/deadLetterView.js';
import { deleteQueues, uniqueHostId } from '../support/broker.js';
import { openConsoleSession } from '../support/consoleSession.js';
import {
  brokerEnv,
  brokerUri,
  dlqUntilSeen,
  removeDeadLettersOf,
  testDeployment,
  waitFor,
} from '../support/federation.js';
import { GatewayProcess } from '../support/GatewayProcess.js';
import { publishConfirmed } from '../support/signedPeer.js';

/**
 * Issue 29 item 10: `agentbridge drain | cat -v` printed the sender's OSC 0 (window title), OSC 52
 * (clipboard write) and `\r\e[2K` (line overwrite), and a letter forged into `bridge.dlx` made
 * `agentbridge dlq show` print colour, OSC 52 and clear-screen raw. Someone else's text reaches a
 * terminal only neutralised; `--json` keeps it exact, with every such character escaped.
 */

/** What a hostile sender puts in a body: each sequence acts on a terminal that prints it raw. */
const escapes = {
  title: '\u001b]0;pwned-title\u0007',
  clipboard: '\u001b]52;c;cm0gLXJmIH4K\u0007',
  overwrite: '\r\u001b[2K',
  colour: '\u001b[31mred\u001b[0m',
  clear: '\u001b[2J\u001b[H',
  bidi: '\u202eevil\u202c',
  c1: '\u009b31m',
};
const body = `before ${Object.values(escapes).join(' ')} after\nsecond line\tand a tab`;

/**
 * The body's lines as a terminal is given them: each acting character a visible U+FFFD, the CR
 * a line break, the tab and the line break kept.
 */
const shownLines = [
  'before \uFFFD]0;pwned-title\uFFFD \uFFFD]52;c;cm0gLXJmIH4K\uFFFD ',
  '\uFFFD[2K \uFFFD[31mred\uFFFD[0m \uFFFD[2J\uFFFD[H \uFFFDevil\uFFFD \uFFFD31m after',
  'second line\tand a tab',
];

/**
 * The characters in `text` that act on a terminal or reorder what it shows: C0 controls but
 * line feed and tab, DEL, C1 controls, and the bidi marks, embeddings, overrides and isolates.
 */
function rawControls(text: string): string[] {
  const bidi = new Set([0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e]);
  const acting = (c: number) =>
    (c < 0x20 && c !== 0x0a && c !== 0x09) ||
    (c >= 0x7f && c <= 0x9f) ||
    bidi.has(c) ||
    (c >= 0x2066 && c <= 0x2069);
  return [...text]
    .map((ch) => ch.codePointAt(0) ?? 0)
    .filter(acting)
    .map((c) => `U+${c.toString(16).toUpperCase().padStart(4, '0')}`);
}

describe('terminal escapes in peers’ text reach no terminal raw', () => {
  let gateway: GatewayProcess;
  let connection: ChannelModel;
  let channel: ConfirmChannel;
  let senderToken: string;
  let readerToken: string;
  const gids: string[] = [];

  const register = async (name: string): Promise<string> => {
    const registered = await gateway.cli(['register', '--kind', 'main', '--name', name, '--json']);
    expect(registered.code, registered.stderr || registered.stdout).toBe(0);
    const { gid, token } = JSON.parse(registered.stdout) as { gid: string; token: string };
    gids.push(gid);
    return token;
  };

  /** Sends `body` from sender to reader through the CLI, as a person would; its msgId. */
  const sendBody = async (): Promise<string> => {
    const sent = await gateway.cli(['send', 'reader', body, '--json'], { BRIDGE_TOKEN: senderToken });
    expect(sent.code, sent.stderr || sent.stdout).toBe(0);
    return (JSON.parse(sent.stdout) as { msgId: string }).msgId;
  };

  /** A letter published straight into `bridge.dlx`, as any broker login with write access could. */
  const forgeDeadLetter = async (content: string): Promise<string> => {
    const msgId = randomUUID();
    await publishConfirmed(
      channel,
      'bridge.dlx',
      '',
      Buffer.from(content),
      {
        [DeadLetterHeader.reason]: `rejected${escapes.colour}${escapes.clear}`,
        [DeadLetterHeader.detail]: `see ${escapes.clipboard}${escapes.overwrite}${escapes.bidi} here`,
        [DeadLetterHeader.queue]: `inbox${escapes.title}`,
        // The gateway's host, so that the letter is removed with this test's others.
        [DeadLetterHeader.host]: gateway.hostId,
      },
      msgId,
    );
    return msgId;
  };

  beforeAll(async () => {
    gateway = new GatewayProcess({ hostId: uniqueHostId('escapes'), env: { ...brokerEnv } });
    await gateway.start();
    senderToken = await register('sender');
    readerToken = await register('reader');
    connection = await amqp.connect(brokerUri);
    channel = await connection.createConfirmChannel();
  });

  afterAll(async () => {
    await channel?.close().catch(() => {});
    await connection?.close().catch(() => {});
    await gateway?.dispose();
    await deleteQueues([...gids.map(inboxName), controlSpec(gateway.hostId).name]);
    await removeDeadLettersOf([gateway.hostId]);
  });

  it('agentbridge drain: the body neutralised, its line break and tab kept; --json carries it exact', async () => {
    const msgId = await sendBody();
    const human = await gateway.cli(['drain'], { BRIDGE_TOKEN: readerToken });
    expect(human.code, human.stderr || human.stdout).toBe(0);
    expect(rawControls(human.stdout)).toEqual([]);
    // The body's later lines indented, so that none can pass for the line of another message.
    expect(human.stdout).toBe(`${msgId} SEND from sender@${gateway.hostId}: ${shownLines.join('\n  ')}\n`);

    await sendBody();
    const json = await gateway.cli(['drain', '--json'], { BRIDGE_TOKEN: readerToken });
    expect(json.code, json.stderr || json.stdout).toBe(0);
    expect(rawControls(json.stdout)).toEqual([]);
    expect((JSON.parse(json.stdout) as Array<{ text: string }>).map((m) => m.text)).toEqual([body]);
  });

  it('agentbridge dlq show and list of a forged letter: escapes in its body and headers printed inert', async () => {
    const msgId = await forgeDeadLetter(body);
    const show = await dlqUntilSeen(
      'dlq show of the letter',
      () => gateway.cli(['dlq', 'show', msgId, '--max', '10000']),
      (r) => r.code === 0,
    );
    expect(rawControls(show.stdout)).toEqual([]);
    expect(show.stdout).toContain(
      'reason:  rejected\uFFFD[31mred\uFFFD[0m\uFFFD[2J\uFFFD[H ' +
        '(see \uFFFD]52;c;cm0gLXJmIH4K\uFFFD ⏎ \uFFFD[2K\uFFFDevil\uFFFD here)\n',
    );
    expect(show.stdout).toContain('queue:   inbox\uFFFD]0;pwned-title\uFFFD\n');
    expect(show.stdout).toContain(`body:    ${shownLines.join(`\n${' '.repeat('body:    '.length)}`)}\n`);

    const list = await dlqUntilSeen(
      'dlq list with the letter',
      () => gateway.cli(['dlq', 'list', '--max', '10000']),
      (r) => r.code === 0 && r.stdout.includes(msgId),
    );
    expect(rawControls(list.stdout)).toEqual([]);

    const json = await dlqUntilSeen(
      'dlq show --json of the letter',
      () => gateway.cli(['dlq', 'show', msgId, '--max', '10000', '--json']),
      (r) => r.code === 0,
    );
    expect(rawControls(json.stdout)).toEqual([]);
    expect(JSON.parse(json.stdout)).toMatchObject({
      msgId,
      reason: `rejected${escapes.colour}${escapes.clear}`,
      detail: `see ${escapes.clipboard}${escapes.overwrite}${escapes.bidi} here`,
      body,
    });
  });

  it('the console: a forged letter’s reason, detail and sender come to the page shown inert', async () => {
    const forger = `mal\u202elory${escapes.title}`;
    const msgId = await forgeDeadLetter(JSON.stringify({ kind: 'SEND', from: { name: forger, host: 'x' } }));
    const printed = await gateway.cli(['console', '--json']);
    expect(printed.code, printed.stderr || printed.stdout).toBe(0);
    const session = await openConsoleSession((JSON.parse(printed.stdout) as { url: string }).url);
    const letter = await waitFor('the console listing the letter', async () => {
      const res = await fetch(`${session.origin}/ui/api/dlq`, { headers: { cookie: session.cookie } });
      expect(res.status).toBe(200);
      const reply = (await res.json()) as { letters: Array<Record<string, string>> };
      return reply.letters.find((l) => l.msgId === msgId);
    });
    for (const [field, value] of Object.entries(letter ?? {})) {
      expect(rawControls(value), field).toEqual([]);
    }
    expect(letter).toMatchObject({
      reason: expect.stringMatching(/^rejected\uFFFD\[31mred/),
      from: expect.stringMatching(/^mal\uFFFDlory\uFFFD\]0;pwned-title\uFFFD@x$/),
    });
  });

  it('the daemon’s log: a line quoting a hostile routing key prints inert and parses back exact', async () => {
    // Any broker login may publish on bridge.roster; a roster queue binds its deployment's `roster.#`.
    const routingKey = rosterKey(testDeployment, `${gateway.hostId}.${escapes.bidi}${escapes.c1}\u2028`);
    await publishConfirmed(
      channel,
      Exchange.roster,
      routingKey,
      Buffer.from('not a presence'),
      {},
      randomUUID(),
    );
    const line = await waitFor('the hostile PRESENCE logged', () =>
      gateway.log
        .split('\n')
        .find(
          (l) => l.includes('ignored a PRESENCE announcement') && l.includes(`roster.${gateway.hostId}.`),
        ),
    );
    expect(rawControls(line)).toEqual([]);
    expect(line).not.toContain('\u2028');
    // Unsigned: refused at its signature, before anything parses it.
    expect(JSON.parse(line)).toMatchObject({ reason: 'bad-signature', routingKey });
    expect(rawControls(gateway.log)).toEqual([]);
  });
});
