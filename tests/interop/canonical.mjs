// Reads a JSON array of request bodies (JSON texts) on standard input; prints, for each, the
// hex SHA-256 of its RFC 8785 form as canonicalize makes it (what a receipt's args_sha256 is).
import { createHash } from 'node:crypto';
import { text } from 'node:stream/consumers';
import canonicalize from 'canonicalize';

const bodies = JSON.parse(await text(process.stdin));
const digests = bodies.map((body) =>
  createHash('sha256').update(canonicalize(JSON.parse(body))).digest('hex'),
);
process.stdout.write(JSON.stringify(digests));
