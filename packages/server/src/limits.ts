/**
 * The bounds the HTTP server enforces on its own, beside the engine's (`limits.ts` there), each
 * with its unit last and the reason for it.
 */

/**
 * Longest segment of an export name, in characters: most file systems refuse a name past 255
 * bytes (NAME_MAX), and the name's characters are ASCII, so one character is one byte. A longer
 * segment is refused as bad input before the file system answers it with an I/O error.
 */
export const exportSegmentCharactersMax = 255;

/**
 * Longest export name, in characters: the directory is created under the export directory, and
 * a path past 1,024 bytes nears PATH_MAX (4,096 on Linux, 1,024 on macOS) once the export
 * directory's own path is in front of it.
 */
export const exportNameCharactersMax = 1024;
