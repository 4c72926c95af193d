/**
 * `deno task dev --with-oidc`: a local OpenID provider (oidc-provider with its development login
 * and consent forms; any login name is accepted and becomes the e-mail claim) and an SSO entry
 * `openid.dev` whose callback maps e-mail → role through a table, so a newcomer can click through
 * a real login at http://localhost:<port>/auth/oidc/dev/login.
 */
import { startOidcIdp } from "../tests/sso/oidc_idp.ts";

/** The callback of the dev entry (the README's example): alice@example.com → app_user. */
export const DEV_SSO_SQL = `
create table if not exists sso_user (email text primary key, role text not null);
insert into sso_user values ('alice@example.com', 'app_user') on conflict do nothing;
create or replace function public.sso_login(p jsonb) returns jsonb
language plpgsql security definer set search_path = public as $$
declare
  c jsonb := p->'identity'->'claims'->'email';
  v_email text := lower(case jsonb_typeof(c) when 'array' then c->>0 else c#>>'{}' end);
  r text;
  next text := p->'state'->>'next';
begin
  select role into r from sso_user where email = v_email;
  if r is null then raise exception 'unknown user' using errcode = 'RS403'; end if;
  return jsonb_build_object(
    'jwt', jsonb_build_object('role', r, 'email', v_email),
    'redirect', case when next ~ '^/[^/\\\\]' then next else '/' end);
end $$;
revoke execute on function public.sso_login(jsonb) from public;
grant execute on function public.sso_login(jsonb) to "~anonymous";
`;

/** Starts the provider; returns the svc flags of the `openid.dev` entry. */
export async function startDevOidc(svcPort: number): Promise<string[]> {
  const host = `localhost:${svcPort}`;
  const idp = await startOidcIdp([`http://${host}/auth/oidc/dev/callback`]);
  console.log(
    `svc dev: OpenID provider at ${idp.issuer}; log in at http://${host}/auth/oidc/dev/login ` +
      `as alice@example.com (any password)`,
  );
  return [
    `--http.public_host=${host}`,
    `--openid.dev.issuer=${idp.issuer}`,
    `--openid.dev.client_id=${idp.clientId}`,
    `--openid.dev.client_secret=${idp.clientSecret}`,
    "--openid.dev.callback_function=public.sso_login",
  ];
}
