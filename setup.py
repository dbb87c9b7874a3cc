"""Ships the top-level `sql/` folder inside the wheel, as `pipeline/sql/` (pipeline/derive.py finds it there).

The rest of the build is declared in pyproject.toml; setuptools' package data cannot reach outside a package.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithSql(build_py):
    """build_py that also copies sql/*.sql into the built package."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "pipeline" / "sql"
        target.mkdir(parents=True, exist_ok=True)
        for sql in sorted(Path(__file__).resolve().parent.joinpath("sql").glob("*.sql")):
            shutil.copy2(sql, target / sql.name)


setup(cmdclass={"build_py": BuildWithSql})
