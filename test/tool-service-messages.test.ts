/**
 * The listing's entries are built as finished messages (tool-service.ts `fileInfo`), not through
 * protobuf-es's `create`: held here to what `create` and `timestampFromMs` make, field for field and
 * in both encodings.
 */
import test from "ava";
import fc from "fast-check";
import { create, equals, toBinary, toJsonString } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { FileInfoSchema, FileType, ListFilesResponseSchema } from "../gen/agentworkspace/v1/tool_pb.js";
import { fileInfo } from "../server/services/tool-service.ts";
import type { EntryType } from "../providers/types.ts";

const TYPES: Record<EntryType, FileType> = { file: FileType.FILE, directory: FileType.DIRECTORY, symlink: FileType.SYMLINK, other: FileType.OTHER };

test("fileInfo makes what create makes, with and without a modification time", (t) => {
  fc.assert(
    fc.property(
      fc.string({ unit: "binary", maxLength: 40 }),
      fc.maxSafeNat(),
      fc.constantFrom<EntryType>("file", "directory", "symlink", "other"),
      fc.option(fc.integer({ min: -(2 ** 40), max: 2 ** 44 }), { nil: undefined }),
      (path, size, type, mtimeMs) => {
        const ours = fileInfo(path, size, type, mtimeMs);
        const theirs = create(FileInfoSchema, { path, size: BigInt(size), type: TYPES[type], ...(mtimeMs === undefined ? {} : { modified: timestampFromMs(mtimeMs) }) });
        t.true(equals(FileInfoSchema, ours, theirs));
        t.deepEqual(Object.keys(ours).sort(), Object.keys(theirs).sort());
        t.deepEqual(toBinary(FileInfoSchema, ours), toBinary(FileInfoSchema, theirs));
        t.is(toJsonString(FileInfoSchema, ours), toJsonString(FileInfoSchema, theirs));
        // A response made of them is taken as it is: create keeps the entries it is given.
        const response = create(ListFilesResponseSchema, { files: [ours] });
        t.is(response.files[0], ours);
      },
    ),
    { numRuns: 300 },
  );
});
