import t from 'tap';
import { EMPTY_SHA256, presign, signHeaders, type SignContext } from '../../../../src/store/s3/sigv4.js';

// The worked examples of AWS's "Signature Calculations for the Authorization Header" and "Query
// String Authentication" pages (S3 API reference, sigv4-header-based-auth / sigv4-query-string-auth):
// an independent check of the signer, besides the S3 server that verifies signatures in the
// integration tests.
const ctx: SignContext = {
  credentials: { accessKeyId: 'AKIAIOSFODNN7EXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', sessionToken: null },
  region: 'us-east-1',
};
const now = new Date('2013-05-24T00:00:00Z');
const host = 'examplebucket.s3.amazonaws.com';

t.test('GET Object with a Range header', async (t) => {
  const h = signHeaders(ctx, { method: 'GET', host, path: '/test.txt', query: [], headers: { Range: 'bytes=0-9' } }, EMPTY_SHA256, now);
  t.equal(
    h.authorization,
    'AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41',
  );
  t.equal(h['x-amz-date'], '20130524T000000Z');
});

t.test('PUT Object: a key with a character that needs encoding, extra signed headers', async (t) => {
  const h = signHeaders(
    ctx,
    { method: 'PUT', host, path: '/test$file.text', query: [], headers: { Date: 'Fri, 24 May 2013 00:00:00 GMT', 'x-amz-storage-class': 'REDUCED_REDUNDANCY' } },
    '44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072',
    now,
  );
  t.match(h.authorization, /SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd$/);
});

t.test('GET Bucket lifecycle: a subresource query with an empty value', async (t) => {
  const h = signHeaders(ctx, { method: 'GET', host, path: '/', query: [['lifecycle', '']], headers: {} }, EMPTY_SHA256, now);
  t.match(h.authorization, /Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543$/);
});

t.test('presigned GET (query string authentication)', async (t) => {
  const url = presign(ctx, { method: 'GET', host, path: '/test.txt', query: [], headers: {} }, `https://${host}`, 86400, now);
  const u = new URL(url);
  t.equal(`${u.origin}${u.pathname}`, 'https://examplebucket.s3.amazonaws.com/test.txt');
  t.same(Object.fromEntries(u.searchParams), {
    'X-Amz-Algorithm': 'AWS4-HMAC-SHA256',
    'X-Amz-Credential': 'AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request',
    'X-Amz-Date': '20130524T000000Z',
    'X-Amz-Expires': '86400',
    'X-Amz-SignedHeaders': 'host',
    'X-Amz-Signature': 'aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404',
  });
});
