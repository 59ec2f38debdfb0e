/**
 * JSON Schemas of what the routes answer: the engine's results as JSON (FeedInfo, Commit,
 * LeaseGrant…), for the OpenAPI document. Responses are serialized with JSON.stringify as they
 * were before they had schemas (server.ts), so these describe the answers and never cut them:
 * every object allows properties beyond those listed, which a newer engine may add.
 */

type Schema = Record<string, unknown>;

const integer = { type: 'integer' };
const string = { type: 'string' };
const boolean = { type: 'boolean' };

/** An object with `required` properties (all listed ones when not given), open to more. */
function object(
  properties: Record<string, Schema>,
  required: readonly string[] = Object.keys(properties),
  description?: string,
): Schema {
  return {
    type: 'object',
    ...(description ? { description } : {}),
    required: [...required],
    properties,
    additionalProperties: true,
  };
}

function nullable(schema: Schema): Schema {
  return { ...schema, type: [schema.type as string, 'null'] };
}

export const commit = object(
  {
    feed: string,
    commit: integer,
    stream: string,
    parent: nullable(integer),
    records: integer,
    firstPosition: integer,
    lastPosition: integer,
    openedAt: { ...integer, description: 'milliseconds since the epoch' },
    sealedAt: { ...integer, description: 'milliseconds since the epoch' },
    message: nullable(string),
    epoch: integer,
    oneShot: boolean,
  },
  undefined,
  'a commit: one sealed stream or one one-shot append',
);

/** An output record line (docs/cli.md): the payload as text, or base64 when it is not UTF-8. */
export const recordLine = object(
  {
    feed: string,
    commit: { type: ['integer', 'null'], description: 'null for a record of an open stream' },
    stream: string,
    seq: integer,
    position: { type: ['integer', 'null'], description: 'null for a record of an open stream' },
    timestamp: integer,
    payload: string,
    payloadBase64: string,
    key: string,
    version: integer,
    tombstone: boolean,
    type: string,
    tags: { type: 'array', items: string },
    fingerprint: string,
    fingerprintBase64: string,
  },
  ['feed', 'commit', 'stream', 'seq', 'position', 'timestamp'],
  'a record line: payload as text, or payloadBase64 when it is not UTF-8',
);

export const retentionPolicy = object(
  { maxAgeMs: integer, maxRecords: integer, maxBytes: integer },
  [],
  'what history to keep ({} keeps all)',
);

const retentionPin = object({ subscription: string, cursor: integer }, []);

export const retentionInfo = object({
  policy: retentionPolicy,
  lowMark: integer,
  lowPosition: integer,
  policyLowMark: integer,
  pinnedBy: nullable(retentionPin),
  lastError: nullable(object({ code: string, message: string })),
});

/** A tiered feed's uploads (`FeedInfo.tiering`): only for a store opened with an object store. */
export const tieringInfo = object({
  remoteSegments: integer,
  remoteBytes: integer,
  pendingSegments: integer,
  pendingBytes: integer,
  retiringSegments: integer,
  nextOrdinal: integer,
  uploadedObjects: integer,
  uploadedBytes: integer,
  requests: integer,
  failures: integer,
  lastError: nullable(object({ code: string, message: string, at: integer })),
  visibleLagMs: object({ count: integer, p50: { type: 'number' }, p99: { type: 'number' }, max: { type: 'number' } }),
  evictedSegments: integer,
  localHistoryBytes: integer,
  localHistoryBytesMax: nullable(integer),
  remoteReads: object({ hits: integer, misses: integer, readAhead: integer, requests: integer, bytesFetched: integer }),
});

/** A follower's syncs with object storage (`FeedInfo.follower`): only for a store opened as a follower. */
export const followerInfo = object({
  syncedAt: integer,
  syncs: integer,
  changes: integer,
  requests: integer,
  failures: integer,
  lastError: nullable(object({ code: string, message: string, at: integer })),
  tail: nullable(object({ url: string, commits: integer, requests: integer })),
});

/** A replicated feed's slots (`FeedInfo.replication`): only for a feed created `durability: 'replicated'`. */
export const replicationInfo = object({
  lastSlot: integer,
  slotsWritten: integer,
  requests: integer,
  stalled: nullable(string),
  slotsRetired: integer,
  slotsPacked: integer,
});

export const feedInfo = object(
  {
    name: string,
    createdAt: integer,
    commits: integer,
    records: integer,
    head: nullable(commit),
    activeStream: nullable(string),
    lease: nullable(object({ epoch: integer, holder: string, expiresAt: integer })),
    epoch: integer,
    durability: { type: 'string', enum: ['local', 'replicated'] },
    lowMark: integer,
    lowPosition: integer,
    retention: retentionInfo,
    horizon: integer,
    tiering: tieringInfo,
    follower: followerInfo,
    replication: replicationInfo,
    fork: object({ feed: string, at: integer }, ['feed', 'at'], 'a fork: the feed and the last commit of it it holds'),
    shared: object(
      { segments: integer, bytes: integer, feeds: { type: 'array', items: string } },
      ['segments', 'bytes', 'feeds'],
      'history segments shared with other feeds (forks), and with which',
    ),
  },
  [
    'name',
    'createdAt',
    'commits',
    'records',
    'head',
    'activeStream',
    'lease',
    'epoch',
    'durability',
    'lowMark',
    'lowPosition',
    'retention',
    'horizon',
  ],
);

export const diskUse = object(
  { historySegments: integer, files: integer, bytes: integer, remoteBytes: integer, notUploadedBytes: integer },
  ['historySegments', 'files', 'bytes'],
);

export const leaseGrant = object({
  epoch: integer,
  token: { ...string, description: 'the fencing token: send it as SS-Fencing-Token' },
  expiresAt: integer,
  holder: string,
});

export const takeoverResult = object({
  grant: leaseGrant,
  head: { ...integer, description: 'the last commit of the feed as restored (0: none)' },
  activeStream: { ...nullable(string), description: 'the stream left open, restored with its records' },
  droppedCommits: { ...integer, description: "commits this node's copy held past the restored head" },
  slots: object({
    fence: integer,
    read: integer,
    historyGroups: integer,
    walGroups: integer,
    groupsFenced: integer,
    requests: integer,
  }),
  history: object(
    { requests: integer, filesReused: integer, bytesReused: integer, filesRefused: integer },
    undefined,
    "the tiered history: object requests for it, and files taken from this node's copy instead of fetched",
  ),
});

export const released = object({ feed: string, released: { const: true } });

export const openedStream = object({ stream: string });

export const streamInfo = object(
  { id: string, state: { type: 'string', description: 'open, sealed, aborted…' }, commit, records: integer },
  ['id', 'state'],
);

export const appended = object({ stream: string, firstSeq: integer, lastSeq: integer });

export const aborted = object({ stream: string, aborted: { const: true } });

export const subscriptionInfo = object({
  name: string,
  cursor: integer,
  createdAt: integer,
  updatedAt: integer,
  lag: object({ commits: integer, records: integer, bytes: integer }),
  trimmed: boolean,
});

export const subscriptionDeleted = object({ feed: string, subscription: string, deleted: { const: true } });

export const polled = object({
  cursor: integer,
  commits: { type: 'array', items: object({ commit, records: { type: 'array', items: recordLine } }) },
});

export const groupInfo = object({
  name: string,
  ackTimeoutMs: integer,
  maxDeliveries: integer,
  orderedBy: { type: 'string', enum: ['commit', 'key'] },
  deadLetter: string,
  cursor: integer,
  held: integer,
  released: integer,
  settledAhead: integer,
  acked: integer,
  parked: integer,
  redelivered: integer,
  lag: object({ commits: integer, records: integer, bytes: integer }),
  createdAt: integer,
  updatedAt: integer,
});

export const groupDeleted = object({ feed: string, group: string, deleted: { const: true } });

export const groupClaims = object({
  claims: {
    type: 'array',
    items: object(
      {
        commit,
        records: { type: 'array', items: recordLine },
        delivery: integer,
        deadline: integer,
        reason: string,
      },
      ['commit', 'records', 'delivery', 'deadline'],
    ),
  },
});

export const groupAcked = object({ commit: integer, acked: { const: true } });

export const nackResult = object({
  commit: integer,
  outcome: { type: 'string', enum: ['released', 'parked'] },
  deliveries: integer,
});

export const trimResult = object(
  {
    lowMark: integer,
    lowPosition: integer,
    segmentsRemoved: integer,
    commitsRemoved: integer,
    recordsRemoved: integer,
    bytesRemoved: integer,
    heldBy: retentionPin,
  },
  ['lowMark', 'lowPosition', 'segmentsRemoved', 'commitsRemoved', 'recordsRemoved', 'bytesRemoved'],
);

export const mergeResult = object({
  merges: { type: 'array', items: { type: 'object', additionalProperties: true } },
  segments: integer,
  putOff: boolean,
});

export const keyCompactionResult = object(
  {
    horizon: integer,
    segmentsCompacted: integer,
    segmentsAfter: integer,
    recordsBefore: integer,
    recordsAfter: integer,
    bytesBefore: integer,
    bytesAfter: integer,
    heldBy: retentionPin,
    putOff: boolean,
  },
  [
    'horizon',
    'segmentsCompacted',
    'segmentsAfter',
    'recordsBefore',
    'recordsAfter',
    'bytesBefore',
    'bytesAfter',
    'putOff',
  ],
);

export const exportManifest = object({
  manifestVersion: integer,
  streamstackVersion: string,
  feed: string,
  mode: string,
  format: string,
  after: integer,
  upTo: integer,
  records: integer,
  columns: { type: 'array', items: object({ name: string, type: string, nullable: boolean }) },
  files: { type: 'array', items: { type: 'object', additionalProperties: true } },
});

export const verifyReport = {
  type: 'object',
  additionalProperties: true,
  description: "a feed's verify report: what was checked and any damage found",
};

/** A cluster's nodes and its leased feeds' writers (`GET /v1/cluster`). */
export const clusterInfo = object({
  node: string,
  nodes: { type: 'array', items: object({ node: string, url: nullable(string), startedAt: integer }) },
  feeds: {
    type: 'array',
    items: object({
      feed: string,
      holder: string,
      node: string,
      url: nullable(string),
      epoch: integer,
      head: nullable(integer),
    }),
  },
});

export const health = object({
  ok: { const: true },
  version: { type: 'string', description: "the server package's version" },
  kernels: {
    type: 'string',
    enum: ['native', 'ts'],
    description: 'the kernels the store runs on: the native module, or the TypeScript twins when it did not load',
  },
  storeFormat: {
    type: 'integer',
    description: "the data directory format this server reads and writes (the store marker's)",
  },
});
