/**
 * The operator console's login as a browser does it, without one: spends a login URL (what
 * `agentbridge console` prints) and keeps the session cookie; then the page's API calls with it.
 */
export interface ConsoleSession {
  /** `bridge_console=<id>`, for a Cookie header. */
  readonly cookie: string;
  /** The Set-Cookie header the login answered with, for its attributes. */
  readonly setCookie: string;
  /** The console's origin (`http://127.0.0.1:PORT`). */
  readonly origin: string;
}

export async function openConsoleSession(loginUrl: string): Promise<ConsoleSession> {
  const res = await fetch(loginUrl, { redirect: 'manual' });
  const setCookie = res.headers.get('set-cookie') ?? '';
  if (res.status !== 303 || res.headers.get('location') !== '/ui/' || !setCookie) {
    throw new Error(`the console login answered ${res.status} without a session: ${await res.text()}`);
  }
  return { cookie: setCookie.split(';')[0] as string, setCookie, origin: new URL(loginUrl).origin };
}

/** A console action as the page POSTs it: JSON, with the session cookie and the page's Origin. */
export function consolePost(session: ConsoleSession, path: string, body: unknown): Promise<Response> {
  return fetch(`${session.origin}${path}`, {
    method: 'POST',
    headers: { cookie: session.cookie, origin: session.origin, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}
