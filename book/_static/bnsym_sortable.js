// Sort a table with class "bnsym-sortable" by the column whose header is clicked (again: reverse).
// Cells that read as numbers sort numerically, the others alphabetically; empty cells go last.
document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll("table.bnsym-sortable")) {
    const headers = table.querySelectorAll("thead th");
    headers.forEach((header, column) => {
      header.addEventListener("click", () => {
        const ascending = header.getAttribute("aria-sort") !== "ascending";
        headers.forEach((h) => h.removeAttribute("aria-sort"));
        header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        const body = table.tBodies[0];
        const key = (row) => row.cells[column].textContent.trim();
        const rows = Array.from(body.rows).sort((a, b) => {
          const [x, y] = [key(a), key(b)];
          if (x === "" || y === "") return (x === "") - (y === "");
          const [u, v] = [Number(x), Number(y)];
          const order = Number.isNaN(u) || Number.isNaN(v) ? x.localeCompare(y) : u - v;
          return ascending ? order : -order;
        });
        body.append(...rows);
      });
    });
  }
});
