import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cappedHeld } from './wait-for.js';

/**
 * Local stand-ins of the endpoints AWS hands credentials out from, real HTTP servers on
 * 127.0.0.1:0 answering in the shapes the AWS documentation gives, so the credential chain is
 * tested over the wire: EC2 instance metadata (IMDSv2), the container credentials endpoint (ECS
 * task roles, EKS Pod Identity) and STS AssumeRoleWithWebIdentity. Each counts the credential
 * requests it answered; tests wait for that count (an event), never for a clock.
 */

/** One set of credentials a stand-in hands out. */
export interface Issued {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly token: string;
  readonly expiration: Date;
}

/** What the next credential request gets: credentials, or a failure status. */
export type Answer = Issued | { readonly status: number };

/** A stand-in endpoint. `issue` decides each credential answer (n counts from 1). */
export interface StandIn {
  readonly url: string;
  /** Credential requests answered so far (the IMDS token and role-listing calls are not counted). */
  readonly count: number;
  /** Headers of every credential request, in order (tests check tokens reached it). */
  readonly seen: readonly { readonly headers: IncomingMessage['headers']; readonly body: string }[];
  /** The credentials the n-th credential request got (from 1); throws if it got a failure. */
  given(n: number): Issued;
  issue: (n: number) => Answer;
  /** Resolves once `n` credential requests have been answered. */
  waitForCount(n: number): Promise<void>;
  close(): Promise<void>;
}

/** Credentials numbered n, expiring `lifeMs` from now. */
export function issued(n: number, lifeMs: number): Issued {
  return { accessKeyId: `ASIA${String(n).padStart(16, '0')}`, secretAccessKey: `secret-${n}`, token: `session-token-${n}`, expiration: new Date(Date.now() + lifeMs) };
}

type Handler = (req: IncomingMessage, body: string, res: ServerResponse, credentialAnswer: () => Answer) => void;

async function standIn(handler: Handler): Promise<StandIn> {
  let count = 0;
  const seen: { headers: IncomingMessage['headers']; body: string }[] = [];
  const answers: Answer[] = [];
  const waiters = new Set<() => void>();
  const self: StandIn = {
    url: '',
    get count() {
      return count;
    },
    seen,
    given(n) {
      const a = answers[n - 1];
      if (a === undefined || 'status' in a) throw new Error(`credential request ${n} got no credentials`);
      return a;
    },
    issue: (n) => issued(n, 3600_000),
    async waitForCount(n) {
      if (count >= n) return;
      let waiter = (): void => undefined;
      const reached = new Promise<void>((resolve) => {
        waiter = () => count >= n && resolve();
        waiters.add(waiter);
      });
      await cappedHeld(reached, `${n} credential requests`).finally(() => waiters.delete(waiter));
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      handler(req, body, res, () => {
        count++;
        seen.push({ headers: req.headers, body });
        const answer = self.issue(count);
        answers.push(answer);
        // Waiters run after the answer is written.
        setImmediate(() => waiters.forEach((w) => w()));
        return answer;
      });
    });
  });
  server.keepAliveTimeout = 1;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  (self as { url: string }).url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return self;
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** The JSON document IMDS and the container endpoint answer with. */
function credentialJson(c: Issued): string {
  return JSON.stringify({ Code: 'Success', LastUpdated: new Date().toISOString(), Type: 'AWS-HMAC', AccessKeyId: c.accessKeyId, SecretAccessKey: c.secretAccessKey, Token: c.token, Expiration: c.expiration.toISOString() });
}

/**
 * EC2 instance metadata, IMDSv2 only
 * (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html):
 * `PUT /latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds` (1–21600) answers a token;
 * without a valid `X-aws-ec2-metadata-token` every GET is 401. `…/iam/security-credentials/` lists
 * the role (404 when the instance has none), `…/{role}` answers the credential JSON.
 */
export async function startImds(options: { role?: string | null } = {}): Promise<StandIn> {
  const role = options.role === undefined ? 'stowage-node' : options.role;
  const tokens = new Set<string>();
  return standIn((req, _body, res, answer) => {
    const path = req.url ?? '';
    if (req.method === 'PUT' && path === '/latest/api/token') {
      const ttl = Number(req.headers['x-aws-ec2-metadata-token-ttl-seconds']);
      if (!(ttl >= 1 && ttl <= 21600)) return send(res, 400, 'text/plain', '');
      const token = `imds-token-${tokens.size + 1}`;
      tokens.add(token);
      return send(res, 200, 'text/plain', token);
    }
    if (!tokens.has(String(req.headers['x-aws-ec2-metadata-token']))) return send(res, 401, 'text/plain', '');
    const base = '/latest/meta-data/iam/security-credentials/';
    if (req.method === 'GET' && path === base) return role === null ? send(res, 404, 'text/plain', '') : send(res, 200, 'text/plain', role);
    if (req.method === 'GET' && role !== null && path === `${base}${role}`) {
      const a = answer();
      return 'status' in a ? send(res, a.status, 'text/plain', '') : send(res, 200, 'text/plain', credentialJson(a));
    }
    send(res, 404, 'text/plain', '');
  });
}

/**
 * The container credentials endpoint
 * (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-iam-roles.html; EKS Pod
 * Identity checks the Authorization token): `GET {path}` answers
 * `{"AccessKeyId","SecretAccessKey","Token","Expiration","RoleArn"}`; a wrong token gets 401.
 */
export async function startContainerEndpoint(path: string, authorization: () => string | null): Promise<StandIn> {
  return standIn((req, _body, res, answer) => {
    if (req.method !== 'GET' || req.url !== path) return send(res, 404, 'application/json', '{}');
    const want = authorization();
    if (want !== null && req.headers.authorization !== want) return send(res, 401, 'application/json', '{"code":"AccessDenied","message":"bad token"}');
    const a = answer();
    if ('status' in a) return send(res, a.status, 'application/json', '{}');
    const { Code: _c, LastUpdated: _l, Type: _t, ...doc } = JSON.parse(credentialJson(a)) as Record<string, string>;
    send(res, 200, 'application/json', JSON.stringify({ ...doc, RoleArn: 'arn:aws:iam::123456789012:role/stowage-task' }));
  });
}

/**
 * STS AssumeRoleWithWebIdentity over the query API
 * (https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html): an
 * unsigned form POST; answers the XML below, or an ErrorResponse (InvalidIdentityToken when the
 * token is not the one `validToken` names).
 */
export async function startSts(roleArn: string, validToken: () => string): Promise<StandIn> {
  return standIn((req, body, res, answer) => {
    const form = new URLSearchParams(body);
    if (req.method !== 'POST' || form.get('Action') !== 'AssumeRoleWithWebIdentity' || form.get('Version') !== '2011-06-15') {
      return send(res, 400, 'text/xml', stsError('InvalidAction', 'Could not find operation'));
    }
    if (form.get('RoleArn') !== roleArn || !/^[\w+=,.@-]{2,64}$/.test(form.get('RoleSessionName') ?? '')) {
      return send(res, 400, 'text/xml', stsError('ValidationError', 'bad RoleArn or RoleSessionName'));
    }
    if (form.get('WebIdentityToken') !== validToken()) return send(res, 400, 'text/xml', stsError('InvalidIdentityToken', 'Token is expired or not valid'));
    const a = answer();
    if ('status' in a) return send(res, a.status, 'text/xml', stsError('ServiceUnavailable', 'try later'));
    send(
      res,
      200,
      'text/xml',
      `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:lfs:stowage</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/lfs/${form.get('RoleSessionName')}</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:${form.get('RoleSessionName')}</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>${a.token}</SessionToken>
      <SecretAccessKey>${a.secretAccessKey}</SecretAccessKey>
      <Expiration>${a.expiration.toISOString()}</Expiration>
      <AccessKeyId>${a.accessKeyId}</AccessKeyId>
    </Credentials>
    <Provider>oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>`,
    );
  });
}

function stsError(code: string, message: string): string {
  return `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>${code}</Code><Message>${message}</Message></Error><RequestId>x</RequestId></ErrorResponse>`;
}
