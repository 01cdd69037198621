/** Small pieces every page uses. */

/** An error for the reader, announced by screen readers; nothing when there is none. */
export function Alert({ text }: { text: string }) {
  if (!text) return null;
  return (
    <p class="error" role="alert">
      {text}
    </p>
  );
}

/** A table's header row: one column header per name. */
export function TableHead({ columns }: { columns: string[] }) {
  return (
    <thead>
      <tr>
        {columns.map((c) => (
          <th key={c} scope="col">
            {c}
          </th>
        ))}
      </tr>
    </thead>
  );
}
