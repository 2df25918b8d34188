// A real OpenID Provider (panva/oidc-provider) for wsync's integration tests.
//
//   OIDC_ISSUER        http://localhost:PORT; we listen on 127.0.0.1:PORT
//   OIDC_CLIENTS       [{"client_id","client_secret","redirect_uris":[...]}, ...]
//   OIDC_ACCOUNTS      {"alice":{"email":..,"name":..,"groups":[..]}, ...}; sub = the key
//   OIDC_TTL_ID_TOKEN  optional, seconds (default 3600)
//
// Sign-in uses the library's built-in dev login form (any password is accepted,
// the login must be a key of OIDC_ACCOUNTS); consent is granted automatically.
// Prints `ready <issuer>` once listening; exits 0 on SIGTERM/SIGINT.

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import Provider, { errors } from 'oidc-provider';

const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`${name} is required`);
  return value;
};

const issuer = env('OIDC_ISSUER');
const clients = JSON.parse(env('OIDC_CLIENTS'));
const accounts = JSON.parse(env('OIDC_ACCOUNTS'));
const idTokenTtl = Number(env('OIDC_TTL_ID_TOKEN', '3600'));

// The scopes we hand out without a consent page: everything the tests ask for.
const SCOPES = 'openid email profile groups';

// A fresh RS256 signing key per run, instead of the library's fixed dev key.
const signingKey = {
  ...generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' }),
  kid: randomBytes(8).toString('hex'),
  alg: 'RS256',
  use: 'sig',
};

const provider = new Provider(issuer, {
  jwks: { keys: [signingKey] },
  // The session cookie defaults to SameSite=None here, which browsers drop
  // without Secure (we are plain http), leaving only a `_session.legacy`
  // fallback. Lax suffices: every hop of the sign-in is a top-level navigation
  // or a same-site form post.
  cookies: {
    keys: [randomBytes(32).toString('hex')],
    long: { signed: true, sameSite: 'lax' },
    short: { signed: true },
  },

  // Confidential web clients doing authorization code + PKCE. application_type
  // 'web' (the default) accepts http redirect URIs, loopback included; only the
  // implicit grant would refuse them. Whichever of client_secret_basic and
  // client_secret_post is registered, the token endpoint accepts both.
  clients: clients.map((client) => ({
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    ...client,
  })),
  pkce: { required: () => true, methods: ['S256'] },

  // Claims released per scope; `sub` comes from the account itself.
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  // As the spec has it (the library's default): with the code flow, the scopes' claims
  // (email, profile, groups) come from userinfo, not in the ID token, so the relying party
  // is tested reading them where a conformant provider puts them. OIDC_CLAIMS_IN_ID_TOKEN=1
  // puts them in the ID token too, as many providers do.
  conformIdTokenClaims: process.env.OIDC_CLAIMS_IN_ID_TOKEN !== '1',

  async findAccount(ctx, sub) {
    if (!Object.hasOwn(accounts, sub)) {
      // An unknown login ends the sign-in at the redirect_uri with
      // error=access_denied, and forgets the session so the next try gets the form.
      await ctx.oidc.session?.destroy();
      throw new errors.AccessDenied(`unknown login ${sub}`);
    }
    return {
      accountId: sub,
      async claims() {
        return { preferred_username: sub, ...accounts[sub], sub };
      },
    };
  },

  // Skip the consent page: the test clients are first party, so every
  // sign-in gets a grant for SCOPES straight away.
  async loadExistingGrant(ctx) {
    const { client, session, result } = ctx.oidc;
    const grantId = result?.consent?.grantId || session.grantIdFor(client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);

    const grant = new ctx.oidc.provider.Grant({
      clientId: client.clientId,
      accountId: session.accountId,
    });
    grant.addOIDCScope(SCOPES);
    await grant.save();
    return grant;
  },

  // Plain numbers (seconds) also keep the library from logging a notice per default.
  ttl: {
    IdToken: idTokenTtl,
    AccessToken: 3600,
    AuthorizationCode: 60,
    Interaction: 3600,
    Session: 86400,
    Grant: 86400,
  },
});

// The library answers 500 without saying why; put the cause in our stderr.
provider.on('server_error', (_ctx, err) => console.error('server_error', err));

// Plain http on loopback: the port is the issuer's, the host always 127.0.0.1.
const { port } = new URL(issuer);
const server = createServer(provider.callback());
server.listen(Number(port || 80), '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
