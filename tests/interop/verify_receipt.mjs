// verify_receipt.mjs: check an approvals receipt in a JavaScript service.
// npm install jose canonicalize
import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { createRemoteJWKSet, jwtVerify } from 'jose';

// The keys come from the bot's JWKS (fetched again when a receipt names a kid it has not
// seen, as after a rotation), never from the caller.
export function receiptVerifier(jwksUrl) {
  const keys = createRemoteJWKSet(new URL(jwksUrl));

  // `args` is exactly what the service is about to act on, parsed from the request's JSON;
  // `fingerprint`, if the gate names one, the service's own fingerprint of that state now.
  return async function verifyReceipt(token, tool, args, fingerprint = undefined) {
    const { payload, protectedHeader } = await jwtVerify(token, keys, {
      algorithms: ['EdDSA'],
      issuer: 'approvals',
      requiredClaims: ['sub', 'jti', 'iat', 'exp'],
    });
    if (payload.tool !== tool) {
      throw new Error(`the receipt is for tool ${payload.tool}, not ${tool}`);
    }
    const digest = createHash('sha256').update(canonicalize(args)).digest('hex');
    if (digest !== payload.args_sha256) {
      throw new Error('the arguments differ from the ones that were approved');
    }
    if (payload.decided_by !== 'person') {
      throw new Error(`no person approved this call: a ${payload.decided_by} released it`);
    }
    if (fingerprint !== undefined && payload.fingerprint !== fingerprint) {
      throw new Error(`the state changed since the approval: ${payload.fingerprint}, now ${fingerprint}`);
    }
    return { claims: payload, header: protectedHeader };
  };
}
