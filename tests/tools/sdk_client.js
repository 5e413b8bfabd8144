// sdk_client.js — drives vsr with the official client SDKs (openai and
// @anthropic-ai/sdk, installed by scripts/setup-deps into $VSR_SDK_DIR) and
// prints what the SDK returned as one JSON line, so the end-to-end tests see
// vsr exactly as those clients do.
//   node sdk_client.js '{"sdk":"anthropic"|"openai","base":URL,"key":K,"op":OP,"params":{...}}'
// ops: anthropic: create, stream (the SDK's MessageStream: text and final message), count_tokens;
//      openai: chat, chat_stream (chunks and their joined text), completions, completions_stream,
//      responses (create, retrieve, previous_response_id, input items, delete), responses_stream,
//      embeddings (as the SDK decodes them: base64 unless params.encoding_format says otherwise).
// "headers" (optional): extra request headers (the openai client's defaultHeaders).
// An SDK error prints {"error":{"status":S,"type":T,"message":M,"name":N}}.
'use strict';
const path = require('path');
const { createRequire } = require('module');

const dir = process.env.VSR_SDK_DIR;
const req = createRequire(path.join(dir, 'package.json'));
const cmd = JSON.parse(process.argv[2]);

async function anthropic() {
  const Anthropic = req('@anthropic-ai/sdk').default;
  const client = new Anthropic({ apiKey: cmd.key || 'none', baseURL: cmd.base, maxRetries: 0, timeout: 20000 });
  if (cmd.op === 'create') {
    const m = await client.messages.create(cmd.params);
    return { message: m };
  }
  if (cmd.op === 'stream') {
    const s = client.messages.stream(cmd.params);
    const events = [];
    let text = '';
    s.on('streamEvent', (e) => events.push(e.type));
    s.on('text', (t) => { text += t; });
    const m = await s.finalMessage();
    return { events, text, message: m };
  }
  if (cmd.op === 'count_tokens') {
    return { count: await client.messages.countTokens(cmd.params) };
  }
  throw new Error('unknown op ' + cmd.op);
}

async function openai() {
  const { OpenAI } = req('openai');
  const client = new OpenAI({ apiKey: cmd.key || 'none', baseURL: cmd.base, maxRetries: 0, timeout: 20000,
                               defaultHeaders: cmd.headers || {} });
  if (cmd.op === 'chat') {
    return { completion: await client.chat.completions.create(cmd.params) };
  }
  if (cmd.op === 'chat_stream') {
    const stream = await client.chat.completions.create({ ...cmd.params, stream: true });
    const chunks = [];
    let text = '';
    for await (const c of stream) {
      chunks.push(c);
      if (c.choices && c.choices[0] && c.choices[0].delta && c.choices[0].delta.content) text += c.choices[0].delta.content;
    }
    return { chunks, text };
  }
  if (cmd.op === 'completions') {
    return { completion: await client.completions.create(cmd.params) };
  }
  if (cmd.op === 'completions_stream') {
    const stream = await client.completions.create({ ...cmd.params, stream: true });
    const chunks = [];
    let text = '';
    for await (const c of stream) {
      chunks.push(c);
      if (c.choices && c.choices[0] && c.choices[0].text) text += c.choices[0].text;
    }
    return { chunks, text };
  }
  if (cmd.op === 'embeddings') {
    return { embeddings: await client.embeddings.create(cmd.params) };
  }
  if (cmd.op === 'responses') {
    // create, retrieve, continue with previous_response_id, list input items, delete, retrieve again
    const first = await client.responses.create(cmd.params);
    const got = await client.responses.retrieve(first.id);
    const next = await client.responses.create({ model: cmd.params.model, input: 'and then?',
                                                 previous_response_id: first.id });
    const items = await client.responses.inputItems.list(first.id);
    const itemList = [];
    for await (const it of items) itemList.push(it);
    await client.responses.delete(first.id);
    let after = null;
    try { await client.responses.retrieve(first.id); } catch (e) { after = e.status; }
    return { first, got, next, items: itemList, after_delete_status: after };
  }
  if (cmd.op === 'responses_stream') {
    const stream = await client.responses.create({ ...cmd.params, stream: true });
    const types = [];
    let text = '';
    let final = null;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed') final = ev.response;
    }
    const got = await client.responses.retrieve(final.id);
    return { types, text, final, got };
  }
  throw new Error('unknown op ' + cmd.op);
}

(cmd.sdk === 'anthropic' ? anthropic() : openai()).then(
  (out) => { process.stdout.write(JSON.stringify(out) + '\n'); },
  (e) => {
    const err = { status: e.status === undefined ? null : e.status, name: e.constructor ? e.constructor.name : null,
                  message: String(e.message || e) };
    if (e.error && typeof e.error === 'object') err.body = e.error;
    process.stdout.write(JSON.stringify({ error: err }) + '\n');
  });
