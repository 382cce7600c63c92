// Checks webhook deliveries with standardwebhooks' Webhook.verify, as a receiver would.
// Reads [{"secret", "headers", "body", "later"}] on standard input (`later`: how many seconds
// after now the receiver gets it, as a replay would arrive); prints, for each, the event
// verify returned or the error it threw.
import { text } from 'node:stream/consumers';
import { Webhook } from 'standardwebhooks';

const deliveries = JSON.parse(await text(process.stdin));
const now = Date.now;
const answers = [];
for (const { secret, headers, body, later } of deliveries) {
  Date.now = () => now() + (later ?? 0) * 1000;
  try {
    answers.push({ event: new Webhook(secret).verify(body, headers) });
  } catch (error) {
    answers.push({ error: `${error.name}: ${error.message}` });
  } finally {
    Date.now = now;
  }
}
process.stdout.write(JSON.stringify(answers));
