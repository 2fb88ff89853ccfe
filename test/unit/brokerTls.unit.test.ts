import { describe, expect, it } from 'vitest';
import { configSchema } from '../../src/config/schema.js';
import { describeBrokerError } from '../../src/federation/describeBrokerError.js';

const tlsError = (code: string, message: string, extra: Record<string, unknown> = {}) =>
  Object.assign(new Error(message), { code, ...extra });

describe('broker connection errors, described for an operator', () => {
  it('names broker.tls.ca for a certificate from an unknown CA', () => {
    const described = describeBrokerError(
      tlsError('SELF_SIGNED_CERT_IN_CHAIN', 'self-signed certificate in certificate chain'),
    );
    expect(described.message).toMatch(
      /^TLS: self-signed certificate in certificate chain — .*check broker\.tls\.ca$/,
    );
    expect(described.needsOperator).toBe(true);
    expect(
      describeBrokerError(
        tlsError('UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'unable to verify the first certificate'),
      ).message,
    ).toContain('check broker.tls.ca');
  });

  it('names broker.tls.servername for a certificate of another name', () => {
    expect(
      describeBrokerError(
        tlsError('ERR_TLS_CERT_ALTNAME_INVALID', "Hostname/IP does not match certificate's altnames"),
      ).message,
    ).toMatch(/^TLS: Hostname.*broker\.tls\.servername/);
  });

  it("names broker.tls.cert/key when the broker rejects the client certificate, with OpenSSL's short reason", () => {
    const described = describeBrokerError(
      tlsError(
        'ERR_SSL_TLSV1_ALERT_UNKNOWN_CA',
        '80ACA7FE:error:0A000418:SSL routines:...:SSL alert number 48\n',
        {
          reason: 'tlsv1 alert unknown ca',
        },
      ),
    );
    expect(described.message).toBe(
      "TLS: the broker refused the handshake (tlsv1 alert unknown ca) — it does not accept this gateway's client certificate; check broker.tls.cert and broker.tls.key (signed by a CA the broker trusts)",
    );
  });

  it('says when the port does not speak TLS', () => {
    expect(
      describeBrokerError(tlsError('ERR_SSL_WRONG_VERSION_NUMBER', 'wrong version number')).message,
    ).toContain('did not answer TLS on this port');
  });

  it('tells a refused login from a refused permission', () => {
    const login = describeBrokerError(
      new Error(
        'Handshake terminated by server: 403 (ACCESS-REFUSED) with message "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."',
      ),
    );
    expect(login.message).toMatch(/^login refused: .*broker\.uri/);
    const permission = describeBrokerError(
      new Error(
        `Channel closed by server: 403 (ACCESS-REFUSED) with message "ACCESS_REFUSED - access to exchange 'bridge.msg' in vhost '/' refused for user 'bridge-x'"`,
      ),
    );
    expect(permission.message).toBe(
      "the broker refused an operation: access to exchange 'bridge.msg' in vhost '/' refused for user 'bridge-x'; " +
        "this login's permissions do not cover it (re-run agentbridge broker provision HOST --apply)",
    );
  });

  it('passes an ordinary network error through as a transient failure', () => {
    expect(describeBrokerError(tlsError('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:5671'))).toEqual({
      message: 'connect ECONNREFUSED 127.0.0.1:5671',
      needsOperator: false,
    });
  });
});

describe('broker.tls in the config', () => {
  const parse = (broker: Record<string, unknown>) => configSchema.safeParse({ broker });
  const issues = (broker: Record<string, unknown>) =>
    (parse(broker).error?.issues ?? []).map((i) => `${i.path.join('.')}: ${i.message}`);

  it('takes ca, cert, key and servername with an amqps:// URI', () => {
    const parsed = parse({
      uri: 'amqps://broker:5671',
      tls: { ca: '/ca.pem', cert: '/c.pem', key: '/c.key', servername: 'broker' },
    });
    expect(parsed.success).toBe(true);
    expect(parsed.data?.broker.tls).toEqual({
      ca: '/ca.pem',
      cert: '/c.pem',
      key: '/c.key',
      servername: 'broker',
    });
  });

  it('refuses a misspelt key, a certificate without its key, and tls with a plain amqp:// URI', () => {
    expect(issues({ uri: 'amqps://b', tls: { cafile: '/ca.pem' } })).toEqual([
      'broker.tls: Unrecognized key: "cafile"',
    ]);
    expect(issues({ uri: 'amqps://b', tls: { cert: '/c.pem' } })).toEqual([
      'broker.tls.key: a client certificate needs both broker.tls.cert and broker.tls.key',
    ]);
    expect(issues({ uri: 'amqp://b', tls: { ca: '/ca.pem' } })).toEqual([
      'broker.tls: is set but broker.uri has a plain amqp:// URI; use amqps:// so the connection is encrypted',
    ]);
  });
});
