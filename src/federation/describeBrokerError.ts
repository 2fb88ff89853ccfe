/**
 * Turns what a failed broker connection threw (a Node TLS error, an AMQP refusal) into one line
 * an operator can act on: what happened and which setting to look at. Pure: no I/O.
 */
export interface BrokerErrorDescription {
  /** For logs and `agentbridge status` (lastError). */
  message: string;
  /**
   * True when retrying cannot help until someone changes a setting (a certificate, a password,
   * a permission); the gateway still retries with backoff, but logs it as an error.
   */
  needsOperator: boolean;
}

/** Node/OpenSSL codes meaning "the broker's certificate does not chain to a CA we trust". */
const untrustedCodes = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'INVALID_CA',
  'INVALID_PURPOSE',
  'PATH_LENGTH_EXCEEDED',
  'CERT_CHAIN_TOO_LONG',
  'UNABLE_TO_DECRYPT_CERT_SIGNATURE',
  'UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY',
]);

const expiryCodes = new Set(['CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID']);

export function describeBrokerError(err: unknown): BrokerErrorDescription {
  const message = err instanceof Error ? err.message : String(err);
  const code = typeof (err as { code?: unknown })?.code === 'string' ? (err as { code: string }).code : '';

  if (untrustedCodes.has(code)) {
    return {
      message: `TLS: ${message} — the broker's certificate is not signed by a CA this gateway trusts; check broker.tls.ca`,
      needsOperator: true,
    };
  }
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    return {
      message: `TLS: ${message} — the broker's certificate is for another name; connect to a name it carries (the host in broker.uri) or set broker.tls.servername`,
      needsOperator: true,
    };
  }
  if (expiryCodes.has(code)) {
    return {
      message: `TLS: ${message} — renew the broker's certificate (or check this host's clock)`,
      needsOperator: true,
    };
  }
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || /wrong version number/i.test(message)) {
    return {
      message: `TLS: ${message} — the broker did not answer TLS on this port; amqps:// needs the broker's TLS listener (usually 5671)`,
      needsOperator: true,
    };
  }
  if (code.startsWith('ERR_SSL_') && code.includes('ALERT')) {
    // The broker ended the handshake: it did not accept our client certificate (or its absence).
    // OpenSSL's message is a multi-line dump; its `reason` is the part a person can read.
    const reason = (err as { reason?: unknown }).reason;
    return {
      message: `TLS: the broker refused the handshake (${typeof reason === 'string' ? reason : message.trim()}) — it does not accept this gateway's client certificate; check broker.tls.cert and broker.tls.key (signed by a CA the broker trusts)`,
      needsOperator: true,
    };
  }
  if (/ACCESS_REFUSED - Login was refused/.test(message)) {
    return {
      message:
        'login refused: the broker does not accept the user and password in broker.uri; ' +
        'check them (agentbridge broker provision HOST prints a gateway login)',
      needsOperator: true,
    };
  }
  const resource = /ACCESS_REFUSED - (access to .* refused for user '[^']*')/.exec(message);
  if (resource) {
    return {
      message:
        `the broker refused an operation: ${resource[1]}; this login's permissions do not cover it ` +
        '(re-run agentbridge broker provision HOST --apply)',
      needsOperator: true,
    };
  }
  const vhost = /NOT_ALLOWED - (access to vhost .* refused for user '[^']*')/.exec(message);
  if (vhost) {
    return {
      message: `the broker refused the login: ${vhost[1]}; grant it permissions there (agentbridge broker provision HOST --apply)`,
      needsOperator: true,
    };
  }
  return { message, needsOperator: false };
}
