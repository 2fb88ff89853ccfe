/** AMQP headers that carry a signature (R-ID3): over the exact published bytes. */
export const SignatureHeader = { signature: 'x-bridge-sig', signer: 'x-bridge-signer' } as const;

/** Which trusted host signed a message, or why it cannot be trusted (security/messageSigning.ts). */
export type SignatureCheck = { ok: true; signer: string } | { ok: false; detail: string };
