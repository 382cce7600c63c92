// Runs docs/receipts.md's verifier (verify_receipt.mjs) over receipts the tests made.
// Reads {"jwks_url", "receipts": [{"token", "tool", "body", "fingerprint"?}]} on standard input; prints, for
// each receipt, what the verifier said, and the RFC 8785 form canonicalize gives the body.
import { text } from 'node:stream/consumers';
import canonicalize from 'canonicalize';
import { receiptVerifier } from './verify_receipt.mjs';

const given = JSON.parse(await text(process.stdin));
const verifyReceipt = receiptVerifier(given.jwks_url);
const answers = [];
for (const { token, tool, body, fingerprint } of given.receipts) {
  const args = JSON.parse(body);
  const answer = { canonical: canonicalize(args) };
  try {
    Object.assign(answer, await verifyReceipt(token, tool, args, fingerprint ?? undefined));
  } catch (error) {
    answer.error = `${error.code ?? error.name}: ${error.message}`;
  }
  answers.push(answer);
}
process.stdout.write(JSON.stringify(answers));
