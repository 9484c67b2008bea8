// Sort and filter the findings tables. Without JavaScript the tables show in full, by dollars.
(function () {
  "use strict";
  function cellValue(row, index) {
    var cell = row.cells[index];
    var sortKey = cell.getAttribute("data-sort");
    return sortKey !== null ? parseFloat(sortKey) : cell.textContent.trim().toLowerCase();
  }
  function sortBy(table, index, button) {
    var body = table.tBodies[0];
    var ascending = button.getAttribute("data-order") !== "ascending";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, index), y = cellValue(b, index);
      var order = x < y ? -1 : x > y ? 1 : 0;
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    table.querySelectorAll("th").forEach(function (th) { th.removeAttribute("aria-sort"); });
    button.setAttribute("data-order", ascending ? "ascending" : "descending");
    button.parentNode.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }
  function makeSortable(table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      button.textContent = th.textContent;
      button.addEventListener("click", function () { sortBy(table, index, button); });
      th.textContent = "";
      th.appendChild(button);
    });
  }
  function makeFilterable(table, input, count) {
    input.hidden = false;
    input.addEventListener("input", function () {
      var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var text = row.textContent.toLowerCase();
        var match = words.every(function (word) { return text.indexOf(word) !== -1; });
        row.hidden = !match;
        shown += match ? 1 : 0;
      });
      count.textContent = words.length ? shown + " shown" : "";
    });
  }
  document.querySelectorAll("table.findings").forEach(function (table) {
    makeSortable(table);
    var box = document.getElementById(table.getAttribute("data-filter"));
    if (box) {
      makeFilterable(table, box.querySelector("input"), box.querySelector("output"));
      box.hidden = false;
    }
  });
})();
