/** Absolute path of the tool's binary for this platform; throws with advice when missing. */
export function toolPath(name: "buf" | "biome"): string;
