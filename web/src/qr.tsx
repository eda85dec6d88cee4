import { encode } from "uqr";

/** A QR code drawn as one SVG path (no image, no network, no inline style). */
export function QrCode({ text, label }: { text: string; label: string }) {
  const { data } = encode(text, { ecc: "M", border: 2 });
  const size = data.length;
  let d = "";
  data.forEach((row, y) => {
    row.forEach((dark, x) => {
      if (dark) d += `M${x} ${y}h1v1h-1z`;
    });
  });
  return (
    <svg
      class="qr"
      viewBox={`0 0 ${size} ${size}`}
      role="img"
      aria-label={label}
      shape-rendering="crispEdges"
    >
      <rect width={size} height={size} fill="#fff" />
      <path d={d} fill="#000" />
    </svg>
  );
}
